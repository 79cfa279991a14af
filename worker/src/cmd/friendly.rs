//! Input as people type it: token counts with suffixes (`32k`, `128K`, `1M`), GPU names by
//! alias or with a typo, model ids in any case (the Hub matches them case-insensitively), each
//! wrong one answered with what it most likely meant.

use anyhow::bail;
use harch_analysis::{Gpu, HardwareTable};
use harch_worker::snapshot;

/// A count with an optional suffix, as vLLM's `--max-model-len` reads one: `k` 1,000, `K`
/// 1,024, `m` 1,000,000, `M` 1,048,576 (`32k` is 32,000 and `32K` 32,768); `_` and `,` may
/// group digits (`1_000`, `8,192`).
pub fn count(text: &str) -> Result<u64, String> {
    let t: String = text
        .trim()
        .chars()
        .filter(|c| *c != '_' && *c != ',')
        .collect();
    let (digits, scale) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1_000u64),
        Some('K') => (&t[..t.len() - 1], 1_024),
        Some('m') => (&t[..t.len() - 1], 1_000_000),
        Some('M') => (&t[..t.len() - 1], 1_048_576),
        _ => (&t[..], 1),
    };
    let bad = || {
        format!(
            "`{text}` is not a count: write digits with an optional k (1,000), K (1,024), m (10^6) or M (2^20), e.g. 32K"
        )
    };
    // `1.5k` is 1,500: a decimal only with a suffix, and only when it lands on a whole count.
    if let Some((whole, frac)) = digits.split_once('.') {
        if scale == 1 || whole.is_empty() && frac.is_empty() {
            return Err(bad());
        }
        let w: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let f: u64 = frac.parse().map_err(|_| bad())?;
        let den = 10u64.checked_pow(frac.len() as u32).ok_or_else(bad)?;
        let num = f.checked_mul(scale).ok_or_else(bad)?;
        if !num.is_multiple_of(den) {
            return Err(format!("`{text}` is not a whole number of tokens"));
        }
        return w
            .checked_mul(scale)
            .and_then(|v| v.checked_add(num / den))
            .ok_or_else(bad);
    }
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(scale))
        .ok_or_else(bad)
}

/// A GPU of the hardware table by id, name or alias; otherwise a usage error naming the
/// closest one and every name the table knows.
pub fn gpu<'t>(table: &'t HardwareTable, name: &str) -> anyhow::Result<&'t Gpu> {
    if let Some(g) = table.find(name) {
        return Ok(g);
    }
    let known = table.names().join(", ");
    match table.closest(name) {
        Some(g) => bail!(
            "no GPU `{name}` in specs/hardware; did you mean `{}`? (known: {known})",
            g.gpu
        ),
        None => bail!("no GPU `{name}` in specs/hardware (known: {known})"),
    }
}

fn looks_like_model_id(arg: &str) -> bool {
    arg.split('/').count() == 2
        && !std::path::Path::new(arg).exists()
        && !arg.ends_with(".yaml")
        && !arg.ends_with(".yml")
}

/// A model id as the bundled snapshots spell it: `deepseek-ai/deepseek-v3` is
/// `deepseek-ai/DeepSeek-V3` (the Hub matches ids case-insensitively), a bundled model's name
/// alone is its id; anything else is left as given (a spec path or name, or an id the resolver
/// answers with what to fetch, see [`resolve`]).
pub fn model_arg(arg: &str) -> anyhow::Result<String> {
    let ids = snapshot::snapshot_ids();
    // A bundled model's name without its organisation (`Llama-3.1-8B`): spec names are
    // snake_case and no path exists by that name, so it can mean only the one id.
    if !arg.contains('/') && !std::path::Path::new(arg).exists() {
        let named: Vec<&&str> = ids
            .iter()
            .filter(|id| {
                id.rsplit('/')
                    .next()
                    .is_some_and(|n| n.eq_ignore_ascii_case(arg))
            })
            .collect();
        if let [id] = named[..] {
            return Ok(id.to_string());
        }
    }
    if !looks_like_model_id(arg) {
        return Ok(arg.to_string());
    }
    if ids.contains(&arg) {
        return Ok(arg.to_string());
    }
    if let Some(id) = ids.iter().find(|id| id.eq_ignore_ascii_case(arg)) {
        return Ok(id.to_string());
    }
    Ok(arg.to_string())
}

/// The truth directory of a model id that is not bundled: the one `harch-worker fetch` wrote
/// (`.harch/truth/<org>__<name>`), else fetched there now from the Hub (config, index, shard
/// headers: no weights). `None` offline (`HF_HUB_OFFLINE`): the caller says what to run.
fn fetched_truth(id: &str) -> anyhow::Result<Option<std::path::PathBuf>> {
    use harch_worker::hub;
    let dir = std::path::PathBuf::from(".harch/truth").join(id.replace('/', "__"));
    if dir.join("config.json").is_file() {
        return Ok(Some(dir));
    }
    let mut opts = hub::FetchOptions::from_env(id, dir.clone());
    if opts.offline {
        return Ok(None);
    }
    opts.progress = false;
    eprintln!(
        "note: `{id}` is not bundled: fetching its truth (config, index, shard headers; no weights) into {}",
        dir.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(hub::fetch_truth(&opts)) {
        Ok(_) => Ok(Some(dir)),
        Err(e) => {
            let what = format!(
                "`{id}` is not bundled and fetching it failed: {e}; to retry: `harch-worker fetch {id} --out DIR`, then `--truth DIR` (offline: HF_HUB_OFFLINE=1)"
            );
            Err(if e.is_transient() {
                crate::cli::transient(anyhow::anyhow!(what))
            } else if matches!(e, hub::FetchError::BadModelId { .. }) {
                crate::cli::usage(anyhow::anyhow!(what))
            } else {
                crate::cli::failed(anyhow::anyhow!(what))
            })
        }
    }
}

/// The bundled model id a model id that is not bundled most likely means: one it begins
/// (`DeepSeek-V2` of `DeepSeek-V2-Lite`), else the nearest by edit distance.
fn bundled_like(arg: &str) -> Option<&'static str> {
    let ids = snapshot::snapshot_ids();
    let lower: Vec<String> = ids.iter().map(|i| i.to_ascii_lowercase()).collect();
    let want = arg.to_ascii_lowercase();
    let prefix = lower.iter().position(|l| l.starts_with(&want));
    let nearest = || {
        harch_engine::diag::closest(&want, lower.iter().map(String::as_str))
            .and_then(|c| lower.iter().position(|l| l == c))
    };
    prefix.or_else(nearest).map(|i| ids[i])
}

/// [`subject::resolve`] of a model argument as people type it ([`model_arg`]), and when it
/// is not found, the bundled model id whose name it spells (`DeepSeek-v3` for
/// `deepseek-ai/DeepSeek-V3`) as a did-you-mean.
pub fn resolve(
    arg: &str,
    truth: Option<&std::path::Path>,
) -> anyhow::Result<harch_worker::subject::Subject> {
    let id = model_arg(arg)?;
    if truth.is_none()
        && looks_like_model_id(&id)
        && !snapshot::snapshot_ids().contains(&id.as_str())
        && let Some(dir) = fetched_truth(&id)?
    {
        return harch_worker::subject::resolve(&id, Some(&dir));
    }
    harch_worker::subject::resolve(&id, truth).map_err(|e| {
        let name = arg.rsplit('/').next().unwrap_or(arg);
        let ids = snapshot::snapshot_ids();
        let lower: Vec<String> = ids
            .iter()
            .map(|i| i.rsplit('/').next().unwrap_or(i).to_ascii_lowercase())
            .collect();
        let want = name.to_ascii_lowercase();
        let hit = lower.iter().position(|l| *l == want).or_else(|| {
            harch_engine::diag::closest(&want, lower.iter().map(String::as_str))
                .and_then(|c| lower.iter().position(|l| l == c))
        });
        match hit {
            Some(i) if !arg.contains('/') => {
                anyhow::anyhow!("{e:#}; did you mean `{}`?", ids[i])
            }
            // An id that is not bundled may be a real Hub id: the error says how to fetch it,
            // and the bundled id it may have meant.
            _ if looks_like_model_id(&id) => match bundled_like(&id) {
                Some(b) => anyhow::anyhow!(
                    "{e:#}; or did you mean the bundled `{b}`? (`harch-worker models` lists them)"
                ),
                None => e,
            },
            _ => e,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_suffixes_people_write() {
        assert_eq!(count("1024"), Ok(1024));
        assert_eq!(count("32k"), Ok(32_000));
        assert_eq!(count("32K"), Ok(32_768));
        assert_eq!(count("128K"), Ok(131_072));
        assert_eq!(count("1M"), Ok(1_048_576));
        assert_eq!(count("1m"), Ok(1_000_000));
        assert_eq!(count("1.5k"), Ok(1_500));
        assert_eq!(count("8,192"), Ok(8_192));
        assert!(count("1.5").is_err());
        assert!(count("32 tokens").unwrap_err().contains("e.g. 32K"));
        assert!(count("k").is_err());
        assert!(count("99999999999999999999K").is_err());
        assert!(count("0.0001k").unwrap_err().contains("whole number"));
    }
}
