//! What-if edits of a spec before it is evaluated (the write-up's chapter 4.2): a slot filled
//! with another component (`attention=mla_sparse_attention`, or `moe.attention=…` for one
//! block) and dims bound to values (`n_index_topk=2048`). The edited definition is evaluated
//! as any spec is, so every figure keeps its one origin. A component that needs dims the model
//! does not bind is refused with the list of them: the editor asks, it never defaults them.

use harch_engine::load::Repo;
use harch_engine::schema::{DimValue, ModelDef, Scalar};
use serde_saphyr::{Location, Spanned};

use crate::whatif::Edit;

/// `[BLOCK.]SLOT=COMPONENT`.
#[derive(Clone, Debug, PartialEq)]
pub struct Swap {
    pub block: Option<String>,
    pub slot: String,
    pub component: String,
}

pub fn parse_swap(text: &str) -> Result<Swap, String> {
    let usage = || {
        format!(
            "--swap `{text}`: expected SLOT=COMPONENT (`attention=mla_sparse_attention`) or BLOCK.SLOT=COMPONENT (`moe.attention=…`)"
        )
    };
    let (lhs, component) = text.split_once('=').ok_or_else(usage)?;
    let (block, slot) = match lhs.trim().split_once('.') {
        Some((b, s)) => (Some(b.trim().to_string()), s.trim().to_string()),
        None => (None, lhs.trim().to_string()),
    };
    let component = component.trim().to_string();
    if slot.is_empty() || component.is_empty() || block.as_deref() == Some("") {
        return Err(usage());
    }
    Ok(Swap {
        block,
        slot,
        component,
    })
}

/// `DIM=VALUE`: an integer (`2048`, `2_048`) or an expression over config and dims
/// (`config.hidden_size * 2`).
pub fn parse_bind(text: &str) -> Result<(String, Scalar), String> {
    let Some((name, value)) = text.split_once('=') else {
        return Err(format!(
            "--bind `{text}`: expected DIM=VALUE (`n_index_topk=2048`)"
        ));
    };
    let (name, value) = (name.trim(), value.trim());
    if name.is_empty()
        || value.is_empty()
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!(
            "--bind `{text}`: expected DIM=VALUE with a dim name of letters, digits and `_`"
        ));
    }
    let scalar = match value.replace(['_', ','], "").parse::<i64>() {
        Ok(v) => Scalar::Int(v),
        Err(_) => Scalar::Text(value.to_string()),
    };
    Ok((name.to_string(), scalar))
}

/// Apply the swaps and binds to model `model` of `repo`. Each edit says what it changed.
pub fn edit(
    repo: &mut Repo,
    model: &str,
    swaps: &[Swap],
    binds: &[(String, Scalar)],
) -> Result<Vec<Edit>, String> {
    let Some(def) = repo.model_def_mut(model) else {
        return Err(format!("no model spec `{model}` to edit"));
    };
    let mut def: ModelDef = def.clone();
    let mut edits = Vec::new();
    let mut needs: Vec<(String, String)> = Vec::new();
    for swap in swaps {
        edits.push(apply_swap(repo, &mut def, swap, &mut needs)?);
    }
    let unbound: Vec<&(String, String)> = needs
        .iter()
        .filter(|(d, _)| !def.dims.contains_key(d) && !binds.iter().any(|(b, _)| b == d))
        .collect();
    if !unbound.is_empty() {
        return Err(ask_for_dims(repo, &def.model, &unbound));
    }
    for (name, value) in binds {
        let text = value.as_expr_text();
        let what = match def.dims.get(name) {
            Some(old) => format!("{name}={text} (was {})", dim_text(&old.value)),
            None if needs.iter().any(|(d, _)| d == name) => format!("{name}={text}"),
            None => {
                let mut known: Vec<&str> = def.dims.keys().map(String::as_str).collect();
                known.extend(needs.iter().map(|(d, _)| d.as_str()));
                return Err(format!(
                    "--bind `{name}`: no dim of `{}` or of a swapped component has that name; dims: {}",
                    def.model,
                    known.join(", ")
                ));
            }
        };
        def.dims.insert(
            name.clone(),
            Spanned::new(
                DimValue::Expr(value.clone()),
                Location::UNKNOWN,
                Location::UNKNOWN,
            ),
        );
        edits.push(Edit {
            what: format!("bind {what}"),
            rows: 0,
            note: "dim bound for the what-if".into(),
        });
    }
    if let Some(slot) = repo.model_def_mut(model) {
        *slot = def;
    }
    Ok(edits)
}

fn dim_text(v: &DimValue) -> String {
    match v {
        DimValue::Expr(s) => s.as_expr_text(),
        DimValue::Anchored(a) => a.value.as_expr_text(),
    }
}

/// Fill `swap.slot` with `swap.component` in every block that has the slot (or the one block
/// named), recording the dims the new component needs that the model does not bind.
fn apply_swap(
    repo: &Repo,
    def: &mut ModelDef,
    swap: &Swap,
    needs: &mut Vec<(String, String)>,
) -> Result<Edit, String> {
    let Some((new, _)) = repo.component_def(&swap.component) else {
        return Err(format!(
            "--swap: no component `{}`{}",
            swap.component,
            suggest(&swap.component, repo.component_names())
        ));
    };
    if let Some(b) = &swap.block
        && !def.blocks.contains_key(b)
    {
        let blocks: Vec<&str> = def.blocks.keys().map(String::as_str).collect();
        return Err(format!(
            "--swap: `{}` has no block `{b}`; blocks: {}",
            def.model,
            blocks.join(", ")
        ));
    }
    let mut changed = Vec::new();
    let mut old_names = Vec::new();
    for (name, block) in def.blocks.iter_mut() {
        if swap.block.as_ref().is_some_and(|b| b != name) {
            continue;
        }
        let Some(fill) = block.value.fill.get_mut(&swap.slot) else {
            continue;
        };
        let old = fill.component().to_string();
        if let Some((old_def, _)) = repo.component_def(&old)
            && old_def.role != new.role
        {
            return Err(format!(
                "--swap: `{}` is a{} {} component; slot `{}` of block `{name}` holds `{old}`, a{} {} component",
                swap.component,
                article(&new.role),
                new.role,
                swap.slot,
                article(&old_def.role),
                old_def.role
            ));
        }
        fill.set_component(&swap.component);
        changed.push(name.clone());
        if !old_names.contains(&old) {
            old_names.push(old);
        }
    }
    if changed.is_empty() {
        let mut slots: Vec<String> = def
            .blocks
            .iter()
            .flat_map(|(b, block)| block.value.fill.keys().map(move |s| format!("{b}.{s}")))
            .collect();
        slots.dedup();
        return Err(format!(
            "--swap: no block of `{}` has slot `{}`; slots: {}",
            def.model,
            swap.slot,
            slots.join(", ")
        ));
    }
    for d in &new.dims {
        if !new.defaults.contains_key(d) && !needs.iter().any(|(n, _)| n == d) {
            needs.push((d.clone(), swap.component.clone()));
        }
    }
    Ok(Edit {
        what: format!(
            "swap {}={} (was {})",
            swap.slot,
            swap.component,
            old_names.join(", ")
        ),
        rows: changed.len(),
        note: format!("blocks {}", changed.join(", ")),
    })
}

/// The refusal that asks for the dims: each with the component that needs it and how the
/// library's models that use that component bind it.
fn ask_for_dims(repo: &Repo, model: &str, unbound: &[&(String, String)]) -> String {
    let mut lines = vec![format!(
        "the swapped component needs {} dim(s) `{model}` does not bind; bind each with --bind DIM=VALUE:",
        unbound.len()
    )];
    for (dim, component) in unbound {
        let seen: Vec<String> = repo
            .models_using(component)
            .iter()
            .filter_map(|m| {
                m.dims
                    .get(dim)
                    .map(|v| format!("{} binds `{}`", m.model, dim_text(&v.value)))
            })
            .collect();
        let summary = repo
            .dims
            .get(dim.as_str())
            .map(|d| format!(" — {}", d.summary))
            .unwrap_or_default();
        let how = if seen.is_empty() {
            String::new()
        } else {
            format!(" ({})", seen.join("; "))
        };
        lines.push(format!("  {dim} (for {component}){summary}{how}"));
    }
    lines.join("\n")
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "n"
    } else {
        ""
    }
}

fn suggest(name: &str, known: Vec<&str>) -> String {
    match harch_engine::diag::closest(name, known.iter().copied()) {
        Some(c) => format!("; did you mean {c}?"),
        None => format!("; components: {}", known.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_and_binds_parse_and_bad_ones_say_the_form() {
        assert_eq!(
            parse_swap("moe.attention = mla_sparse_attention").unwrap(),
            Swap {
                block: Some("moe".into()),
                slot: "attention".into(),
                component: "mla_sparse_attention".into()
            }
        );
        assert!(
            parse_swap("attention")
                .unwrap_err()
                .contains("SLOT=COMPONENT")
        );
        assert!(parse_swap(".attention=x").is_err());
        assert!(parse_swap("attention=").is_err());
        assert_eq!(
            parse_bind("n_index_topk=2_048").unwrap(),
            ("n_index_topk".into(), Scalar::Int(2048))
        );
        assert_eq!(
            parse_bind("d=config.hidden_size * 2").unwrap().1,
            Scalar::Text("config.hidden_size * 2".into())
        );
        assert!(parse_bind("a b=1").is_err());
        assert!(parse_bind("=1").is_err());
    }
}
