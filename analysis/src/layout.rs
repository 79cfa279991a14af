//! Deployment layouts: the TP, DP, EP degrees of each part of the model and the PP degree, from
//! a command-line string (`attn=dp8,moe=ep8,pp=2`) or a YAML file. A layout says only how many
//! ways each part is split; which axes a degree splits follows the engine's dims
//! (`shardable_by` in `specs/arch/dims.yaml`), see [`crate::shard`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// A part of the model: every op belongs to one (see `shard::part_of`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// Attention and other token mixers (roles `attention`, `mixer`).
    Attn,
    /// Dense feed-forward networks (role `ffn_dense` outside an MoE).
    Dense,
    /// Mixture-of-experts FFNs: router, routed experts, shared experts (role `ffn_moe`).
    Moe,
    /// Embedding and output head (ops that carry a `vocab` dim).
    Vocab,
    /// Norms and residual adds between the parts; follows the attention's token placement.
    Residual,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Attn => "attn",
            Part::Dense => "ffn",
            Part::Moe => "moe",
            Part::Vocab => "vocab",
            Part::Residual => "residual",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Degrees {
    pub tp: u32,
    pub dp: u32,
    pub ep: u32,
}

impl Degrees {
    pub fn product(&self) -> u64 {
        self.tp as u64 * self.dp as u64 * self.ep as u64
    }
}

impl fmt::Display for Degrees {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        for (k, v) in [("tp", self.tp), ("ep", self.ep), ("dp", self.dp)] {
            if v > 1 {
                parts.push(format!("{k}{v}"));
            }
        }
        if parts.is_empty() {
            parts.push("tp1".into());
        }
        write!(f, "{}", parts.join(""))
    }
}

/// How tokens reach experts on other GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatch {
    /// Each token goes only to the GPUs of its chosen experts, and back.
    #[default]
    AllToAll,
    /// Every GPU of the expert group gathers all its tokens; outputs are reduce-scattered.
    AllGather,
}

/// Which way the tensor-parallel groups run across GPU numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mesh {
    /// TP groups are consecutive GPUs (inside a node when they fit).
    #[default]
    TpInner,
    /// TP groups stride across the stage; data and expert groups are consecutive.
    TpOuter,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Layout {
    pub gpus: u32,
    pub pp: u32,
    pub attn: Degrees,
    pub dense: Degrees,
    pub moe: Degrees,
    pub vocab: Degrees,
    pub dispatch: Dispatch,
    pub mesh: Mesh,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("layout: {message}")]
pub struct LayoutError {
    pub message: String,
    pub hint: Option<String>,
}

/// The largest degree and GPU count a layout may give (larger ones are typos, and would
/// overflow the arithmetic of shares).
pub const MAX_DEGREE: u32 = 1 << 16;
pub const MAX_GPUS: u32 = 1 << 20;

fn err<T>(message: String, hint: Option<&str>) -> Result<T, LayoutError> {
    Err(LayoutError {
        message,
        hint: hint.map(str::to_string),
    })
}

/// Degrees as written: absent ones are filled when the layout is resolved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GivenDegrees {
    pub tp: Option<u32>,
    pub dp: Option<u32>,
    pub ep: Option<u32>,
}

/// A layout as written, before the GPU count fills in what it leaves out.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    pub gpus: Option<u32>,
    pub pp: Option<u32>,
    #[serde(alias = "attention")]
    pub attn: Option<GivenDegrees>,
    #[serde(alias = "dense", alias = "mlp")]
    pub ffn: Option<GivenDegrees>,
    #[serde(alias = "experts")]
    pub moe: Option<GivenDegrees>,
    #[serde(alias = "embed", alias = "head")]
    pub vocab: Option<GivenDegrees>,
    pub dispatch: Option<Dispatch>,
    pub mesh: Option<Mesh>,
}

/// Every name `LayoutSpec::parse` takes before `=`.
const PART_NAMES: [&str; 14] = [
    "attn",
    "attention",
    "ffn",
    "dense",
    "mlp",
    "moe",
    "experts",
    "vocab",
    "embed",
    "head",
    "pp",
    "gpus",
    "dispatch",
    "mesh",
];

fn did_you_mean(name: &str, known: &[&str]) -> String {
    harch_engine::diag::closest(name, known.iter().copied())
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default()
}

fn parse_degrees(part: &str, text: &str) -> Result<GivenDegrees, LayoutError> {
    let mut g = GivenDegrees::default();
    let mut rest = text;
    if rest.is_empty() {
        return err(
            format!("`{part}=` gives no degrees"),
            Some("e.g. attn=tp4dp2"),
        );
    }
    while !rest.is_empty() {
        let key: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let after = &rest[key.len()..];
        let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() {
            return err(
                format!("`{part}={text}`: `{key}` needs a degree"),
                Some("write degrees as tp<N>, dp<N>, ep<N>, e.g. attn=tp4dp2"),
            );
        }
        let n: u32 = match digits.parse() {
            Ok(n) if (1..=MAX_DEGREE).contains(&n) => n,
            _ => {
                return err(
                    format!("`{part}={text}`: degree `{digits}` must be 1 to {MAX_DEGREE}"),
                    None,
                );
            }
        };
        let slot = match key.as_str() {
            "tp" => &mut g.tp,
            "dp" => &mut g.dp,
            "ep" => &mut g.ep,
            other => {
                return err(
                    format!(
                        "`{part}={text}`: unknown degree `{other}`{}",
                        did_you_mean(other, &["tp", "dp", "ep"])
                    ),
                    Some("degrees are tp (tensor), dp (data), ep (expert)"),
                );
            }
        };
        if slot.replace(n).is_some() {
            return err(format!("`{part}={text}` gives `{key}` twice"), None);
        }
        rest = &after[digits.len()..];
    }
    Ok(g)
}

impl LayoutSpec {
    /// `attn=dp8,moe=ep8`, `attn=tp4dp2,ffn=tp8,moe=ep8,pp=2,dispatch=allgather,mesh=tp-outer`.
    pub fn parse(text: &str) -> Result<LayoutSpec, LayoutError> {
        let mut s = LayoutSpec::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                return err(
                    format!("`{item}` is not `part=degrees`"),
                    Some("e.g. attn=dp8,moe=ep8"),
                );
            };
            let (k, v) = (k.trim(), v.trim());
            let set = |slot: &mut Option<GivenDegrees>| -> Result<(), LayoutError> {
                if slot.replace(parse_degrees(k, v)?).is_some() {
                    return err(format!("part `{k}` is given twice"), None);
                }
                Ok(())
            };
            match k {
                "attn" | "attention" => set(&mut s.attn)?,
                "ffn" | "dense" | "mlp" => set(&mut s.ffn)?,
                "moe" | "experts" => set(&mut s.moe)?,
                "vocab" | "embed" | "head" => set(&mut s.vocab)?,
                "pp" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_DEGREE).contains(&n) => s.pp = Some(n),
                    _ => return err(format!("`pp={v}`: a degree of 1 to {MAX_DEGREE}"), None),
                },
                "gpus" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_GPUS).contains(&n) => s.gpus = Some(n),
                    _ => return err(format!("`gpus={v}`: a count of 1 to {MAX_GPUS}"), None),
                },
                "dispatch" => {
                    s.dispatch = Some(match v {
                        "a2a" | "all_to_all" | "alltoall" => Dispatch::AllToAll,
                        "allgather" | "all_gather" => Dispatch::AllGather,
                        _ => {
                            return err(
                                format!(
                                    "`dispatch={v}`: a2a or allgather{}",
                                    did_you_mean(v, &["a2a", "allgather"])
                                ),
                                None,
                            );
                        }
                    })
                }
                "mesh" => {
                    s.mesh = Some(match v {
                        "tp-inner" => Mesh::TpInner,
                        "tp-outer" => Mesh::TpOuter,
                        _ => {
                            return err(
                                format!(
                                    "`mesh={v}`: tp-inner or tp-outer{}",
                                    did_you_mean(v, &["tp-inner", "tp-outer"])
                                ),
                                None,
                            );
                        }
                    })
                }
                other => {
                    return err(
                        format!("unknown part `{other}`{}", did_you_mean(other, &PART_NAMES)),
                        Some("parts: attn, ffn, moe, vocab; settings: pp, gpus, dispatch, mesh"),
                    );
                }
            }
        }
        Ok(s)
    }

    /// The YAML form: `{ gpus: 8, attn: { dp: 8 }, moe: { ep: 8 }, pp: 1 }`.
    pub fn from_yaml(text: &str) -> Result<LayoutSpec, LayoutError> {
        serde_saphyr::from_str(text).map_err(|e| LayoutError {
            message: e.to_string(),
            hint: Some(
                "fields: gpus, pp, attn, ffn, moe, vocab (each {tp, dp, ep}), dispatch, mesh"
                    .into(),
            ),
        })
    }

    /// Fills what the spec leaves out: the GPU count (`gpus`, else the largest part × pp), each
    /// part's missing degree (dp takes what tp × ep leave of the stage), and parts not given
    /// (ffn and vocab follow attn; moe follows attn with ep 1).
    pub fn resolve(&self, gpus: Option<u32>) -> Result<Layout, LayoutError> {
        // A YAML layout is not range-checked by the parser: check every number here.
        let degrees = [&self.attn, &self.ffn, &self.moe, &self.vocab]
            .into_iter()
            .flatten()
            .flat_map(|g| [g.tp, g.dp, g.ep])
            .chain([self.pp])
            .flatten();
        for d in degrees {
            if !(1..=MAX_DEGREE).contains(&d) {
                return err(format!("degree {d} is not 1 to {MAX_DEGREE}"), None);
            }
        }
        for g in [gpus, self.gpus].into_iter().flatten() {
            if !(1..=MAX_GPUS).contains(&g) {
                return err(format!("{g} GPUs: give 1 to {MAX_GPUS}"), None);
            }
        }
        let pp = self.pp.unwrap_or(1);
        let explicit = |g: &Option<GivenDegrees>| {
            g.and_then(|g| Some(g.tp.unwrap_or(1) as u64 * g.dp? as u64 * g.ep.unwrap_or(1) as u64))
        };
        let gpus = match (gpus, self.gpus) {
            (Some(a), Some(b)) if a != b => {
                return err(format!("--gpus {a} but the layout says gpus: {b}"), None);
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => {
                let widest = [&self.attn, &self.ffn, &self.moe, &self.vocab]
                    .iter()
                    .filter_map(|g| {
                        explicit(g).or_else(|| {
                            g.map(|g| g.tp.unwrap_or(1) as u64 * g.ep.unwrap_or(1) as u64)
                        })
                    })
                    .max()
                    .unwrap_or(1);
                match u32::try_from(widest * pp as u64) {
                    Ok(g) if g <= MAX_GPUS => g,
                    _ => return err(format!("the layout covers more than {MAX_GPUS} GPUs"), None),
                }
            }
        };
        if gpus == 0 || !gpus.is_multiple_of(pp) {
            return err(
                format!("{gpus} GPUs do not split into pp = {pp} stages"),
                Some("the GPU count must be a multiple of pp"),
            );
        }
        let stage = gpus / pp;
        let fill = |name: &str, g: GivenDegrees| -> Result<Degrees, LayoutError> {
            let tp = g.tp.unwrap_or(1);
            let ep = g.ep.unwrap_or(1);
            let dp = match g.dp {
                Some(dp) => dp,
                None => {
                    if tp as u64 * ep as u64 > stage as u64 || !stage.is_multiple_of(tp * ep) {
                        return err(
                            format!(
                                "{name}: tp {tp} × ep {ep} does not divide the {stage} GPUs of a stage"
                            ),
                            Some("degrees of a part multiply to the GPUs per pipeline stage"),
                        );
                    }
                    stage / (tp * ep)
                }
            };
            let d = Degrees { tp, dp, ep };
            if d.product() != stage as u64 {
                return err(
                    format!(
                        "{name}: {d} covers {} GPUs, but a stage has {stage} ({gpus} GPUs / pp {pp})",
                        d.product()
                    ),
                    Some("degrees of a part multiply to the GPUs per pipeline stage"),
                );
            }
            Ok(d)
        };
        let attn = fill("attn", self.attn.unwrap_or_default())?;
        if attn.ep > 1 {
            return err(
                "attn: ep applies to experts only".into(),
                Some("use moe=ep<N>"),
            );
        }
        let follow = GivenDegrees {
            tp: Some(attn.tp),
            dp: Some(attn.dp),
            ep: None,
        };
        let dense = fill("ffn", self.ffn.unwrap_or(follow))?;
        let vocab = fill("vocab", self.vocab.unwrap_or(follow))?;
        let moe = fill("moe", self.moe.unwrap_or(follow))?;
        for (n, d) in [("ffn", dense), ("vocab", vocab)] {
            if d.ep > 1 {
                return err(
                    format!("{n}: ep applies to experts only"),
                    Some("use moe=ep<N>"),
                );
            }
        }
        Ok(Layout {
            gpus,
            pp,
            attn,
            dense,
            moe,
            vocab,
            dispatch: self.dispatch.unwrap_or_default(),
            mesh: self.mesh.unwrap_or_default(),
        })
    }
}

impl Layout {
    /// GPUs of one pipeline stage.
    pub fn stage_gpus(&self) -> u32 {
        self.gpus / self.pp
    }

    pub fn degrees(&self, part: Part) -> Degrees {
        match part {
            Part::Attn | Part::Residual => self.attn,
            Part::Dense => self.dense,
            Part::Moe => self.moe,
            Part::Vocab => self.vocab,
        }
    }

    /// How many ways a part splits the step's tokens (its data-parallel ways; for the MoE, the
    /// expert ranks hold distinct tokens too).
    pub fn token_split(&self, part: Part) -> u32 {
        let d = self.degrees(part);
        d.dp * d.ep
    }

    /// The same layout with the expert degree set to `ep` and the GPU count scaled so that
    /// every other part keeps its TP degree (data parallelism takes the rest): the family a
    /// `--sweep ep=...` walks.
    pub fn with_ep(&self, ep: i128) -> Result<Layout, LayoutError> {
        let gpus = ep * self.moe.tp as i128 * self.moe.dp as i128 * self.pp as i128;
        if !(1..=MAX_GPUS as i128).contains(&gpus) || ep > MAX_DEGREE as i128 {
            return err(format!("ep {ep} needs more than {MAX_GPUS} GPUs"), None);
        }
        let (ep, stage) = (ep as u32, (gpus / self.pp as i128) as u32);
        let spec = LayoutSpec {
            gpus: Some(stage * self.pp),
            pp: Some(self.pp),
            attn: Some(GivenDegrees {
                tp: Some(self.attn.tp),
                dp: None,
                ep: None,
            }),
            ffn: Some(GivenDegrees {
                tp: Some(self.dense.tp),
                dp: None,
                ep: None,
            }),
            moe: Some(GivenDegrees {
                tp: Some(self.moe.tp),
                dp: Some(self.moe.dp),
                ep: Some(ep),
            }),
            vocab: Some(GivenDegrees {
                tp: Some(self.vocab.tp),
                dp: None,
                ep: None,
            }),
            dispatch: Some(self.dispatch),
            mesh: Some(self.mesh),
        };
        spec.resolve(None)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attn={},ffn={},moe={},vocab={}",
            self.attn, self.dense, self.moe, self.vocab
        )?;
        if self.pp > 1 {
            write!(f, ",pp={}", self.pp)?;
        }
        if self.dispatch != Dispatch::default() {
            write!(f, ",dispatch=allgather")?;
        }
        if self.mesh != Mesh::default() {
            write!(f, ",mesh=tp-outer")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(s: &str, gpus: Option<u32>) -> Result<Layout, LayoutError> {
        LayoutSpec::parse(s)?.resolve(gpus)
    }

    #[test]
    fn the_anchor_layout_resolves_with_defaults_filled() {
        let l = resolve("attn=dp8,moe=ep8", Some(8)).unwrap();
        assert_eq!(
            l.attn,
            Degrees {
                tp: 1,
                dp: 8,
                ep: 1
            }
        );
        assert_eq!(
            l.moe,
            Degrees {
                tp: 1,
                dp: 1,
                ep: 8
            }
        );
        assert_eq!(l.dense, l.attn);
        assert_eq!(l.vocab, l.attn);
        assert_eq!(l.to_string(), "attn=dp8,ffn=dp8,moe=ep8,vocab=dp8");
        // The GPU count follows from the layout when not given.
        assert_eq!(resolve("attn=tp8", None).unwrap().gpus, 8);
        assert_eq!(resolve("attn=tp2,pp=2", Some(8)).unwrap().attn.dp, 2);
    }

    #[test]
    fn layout_typos_get_a_did_you_mean() {
        let msg = |s: &str| LayoutSpec::parse(s).unwrap_err().message;
        assert!(
            msg("atn=tp8").contains("did you mean `attn`?"),
            "{}",
            msg("atn=tp8")
        );
        assert!(msg("moe=ee8").contains("unknown degree `ee`; did you mean `ep`?"));
        assert!(msg("attn=tp8,dispatch=allgathr").contains("did you mean `allgather`?"));
        assert!(msg("attn=tp8,mesh=tp-outr").contains("did you mean `tp-outer`?"));
        // Nothing close: no guess, the hint lists the parts.
        let e = LayoutSpec::parse("zzzzzz=tp8").unwrap_err();
        assert!(!e.message.contains("did you mean"), "{}", e.message);
        assert!(e.hint.unwrap().contains("parts: attn"));
    }

    #[test]
    fn a_layout_that_does_not_cover_the_gpus_is_a_clear_error() {
        let e = resolve("attn=tp3dp2", Some(8)).unwrap_err();
        assert!(e.message.contains("covers 6 GPUs"), "{e}");
        let e = resolve("attn=tp8", Some(12)).unwrap_err();
        assert!(e.message.contains("does not divide the 12 GPUs"), "{e}");
        assert!(
            resolve("attn=xp8", Some(8))
                .unwrap_err()
                .message
                .contains("unknown degree")
        );
        assert!(
            resolve("attn=tp", Some(8))
                .unwrap_err()
                .message
                .contains("needs a degree")
        );
        assert!(resolve("attn=tp0", Some(8)).is_err());
        assert!(
            resolve("cpu=tp8", Some(8))
                .unwrap_err()
                .message
                .contains("unknown part")
        );
        assert!(
            resolve("attn=ep8", Some(8))
                .unwrap_err()
                .message
                .contains("experts only")
        );
        assert!(
            resolve("attn=tp8,pp=3", Some(8))
                .unwrap_err()
                .message
                .contains("pp = 3")
        );
    }

    #[test]
    fn absurd_numbers_are_errors_not_overflows() {
        assert!(resolve("attn=tp4294967295", None).is_err());
        assert!(resolve("attn=tp65536dp65536,moe=ep65536", None).is_err());
        assert!(resolve("attn=tp8", Some(0)).is_err());
        let yaml = "attn: { tp: 65536, dp: 65536 }\nmoe: { ep: 65536, tp: 65536 }\n";
        assert!(LayoutSpec::from_yaml(yaml).unwrap().resolve(None).is_err());
        let yaml = "attn: { tp: 0 }\n";
        assert!(
            LayoutSpec::from_yaml(yaml)
                .unwrap()
                .resolve(Some(8))
                .is_err()
        );
        let l = resolve("attn=dp8,moe=ep8", Some(8)).unwrap();
        assert!(l.with_ep(1 << 40).is_err());
        assert_eq!(l.with_ep(16).unwrap().gpus, 16);
    }

    #[test]
    fn yaml_and_string_forms_agree() {
        let a = resolve("attn=tp2dp4,moe=ep8,pp=2,dispatch=allgather", Some(16)).unwrap();
        let b = LayoutSpec::from_yaml(
            "gpus: 16\npp: 2\nattn: { tp: 2, dp: 4 }\nmoe: { ep: 8 }\ndispatch: all_gather\n",
        )
        .unwrap()
        .resolve(None)
        .unwrap();
        assert_eq!(a, b);
        assert!(LayoutSpec::from_yaml("attn: { tq: 2 }").is_err());
    }

    #[test]
    fn an_ep_sweep_scales_the_gpus_and_keeps_tp() {
        let base = resolve("attn=tp2dp4,moe=ep8", Some(8)).unwrap();
        let l = base.with_ep(32).unwrap();
        assert_eq!(l.gpus, 32);
        assert_eq!(
            l.attn,
            Degrees {
                tp: 2,
                dp: 16,
                ep: 1
            }
        );
        assert_eq!(l.moe.ep, 32);
    }
}
