//! The page: `assets/page.html` with its stylesheet, script and the model's data inlined. The
//! data is JSON in a `<script type="application/json">` element; integers past 2^53 (FLOPs,
//! bytes of large models) travel as strings the script reads as `BigInt`, so every figure
//! reaches the page exactly as the engine computed it.

use serde_json::Value;

use crate::PageOptions;
use crate::model::ModelData;

const PAGE: &str = include_str!("../assets/page.html");
const STYLE: &str = include_str!("../assets/page.css");
const SCRIPT: &str = include_str!("../assets/page.js");

/// The largest integer a JavaScript number holds exactly.
const SAFE: u64 = (1 << 53) - 1;

/// Integers a JavaScript number cannot hold exactly become decimal strings.
fn exact_for_js(v: &mut Value) {
    match v {
        Value::Number(n) => {
            let big = n.as_i64().map(|x| x.unsigned_abs() > SAFE).unwrap_or(false)
                || n.as_u64().map(|x| x > SAFE).unwrap_or(false);
            if big {
                *v = Value::String(n.to_string());
            }
        }
        Value::Array(a) => a.iter_mut().for_each(exact_for_js),
        Value::Object(o) => o.values_mut().for_each(exact_for_js),
        _ => {}
    }
}

/// Text safe inside HTML (element content and attribute values).
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The data document the page's script reads.
pub fn data(model: &ModelData, opts: &PageOptions) -> anyhow::Result<Value> {
    let mut v = serde_json::json!({
        "model": model,
        "compare": opts.compare,
        "deployment": opts.deployment,
    });
    exact_for_js(&mut v);
    Ok(v)
}

pub fn render(model: &ModelData, opts: &PageOptions) -> anyhow::Result<String> {
    let json = serde_json::to_string(&data(model, opts)?)?;
    // No `</script>` or `<!--` can occur inside the element: every `<` is escaped in JSON.
    let json = json.replace('<', "\\u003c");
    let title = match &opts.compare {
        Some(b) => format!("{} vs {} — harch Inspector", model.title, b.title),
        None => format!("{} — harch Inspector", model.title),
    };
    Ok(PAGE
        .replace("{{TITLE}}", &escape(&title))
        .replace("{{STYLE}}", STYLE)
        .replace("{{DATA}}", &json)
        .replace("{{SCRIPT}}", SCRIPT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_integers_travel_as_strings_and_no_tag_can_close_the_data() {
        let mut v = serde_json::json!({"a": 9007199254740993_i64, "b": 12, "c": ["</script>"]});
        exact_for_js(&mut v);
        assert_eq!(v["a"], "9007199254740993");
        assert_eq!(v["b"], 12);
        let t = serde_json::to_string(&v).unwrap().replace('<', "\\u003c");
        assert!(!t.contains("</"));
        let back: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(back["c"][0], "</script>");
    }
}
