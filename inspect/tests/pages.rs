//! What every library model's page embeds, without a browser: the formulas the page evaluates
//! read back to the engine's values with the bindings it carries (so the slider is the engine's
//! figure at every context), the figures are the engine's summary, and the file stays small.

use std::collections::BTreeMap;

use harch_engine::Q;
use harch_inspect::formula::eval;
use harch_inspect::{PageOptions, collect, page};
use harch_library::subject;

fn at(bindings: &BTreeMap<String, i128>, ctx: i128) -> BTreeMap<String, i128> {
    let mut env = bindings.clone();
    env.insert("ctx".into(), ctx);
    env
}

#[test]
fn every_embedded_formula_reads_back_to_the_engines_value() {
    for id in harch_truth::snapshot::snapshot_ids() {
        let s = subject::resolve(id, None).unwrap();
        let data = collect(id, &s).unwrap();
        assert!(data.verdict.valid, "{id}: {:?}", data.verdict.errors);
        let (_, a) = subject::evaluated(&s, harch_engine::EvalOptions::default()).unwrap();
        assert_eq!(
            data.figures.as_ref().unwrap(),
            &serde_json::to_value(a.summary()).unwrap(),
            "{id}: the figures are the engine's summary"
        );
        let limit = data.context_limit.unwrap_or(4096);
        for ctx in [1, 7, 4096, limit / 3, limit] {
            let env = at(&data.bindings, ctx);
            let kv = eval(&data.lens.total.kv_formula, &env)
                .unwrap_or_else(|e| panic!("{id}: {e} in {}", data.lens.total.kv_formula));
            assert_eq!(
                kv,
                a.cache_bytes_at(ctx),
                "{id}: KV at {ctx} from {}",
                data.lens.total.kv_formula
            );
            let flops = eval(&data.lens.total.flops_formula, &env).unwrap();
            assert_eq!(
                flops,
                a.decode_flops(&Q::lit(ctx)).v,
                "{id}: FLOPs at {ctx}"
            );
            let parts: i128 = data
                .lens
                .parts
                .iter()
                .map(|p| eval(&p.kv_formula, &env).unwrap())
                .sum();
            assert_eq!(parts, kv, "{id}: the parts' KV add up at {ctx}");
        }
        let env = at(&data.bindings, data.lens.context);
        for scope in &data.scopes {
            for n in scope.nodes.iter().filter(|n| n.kind != "io") {
                let p = eval(&n.params_formula, &env)
                    .unwrap_or_else(|e| panic!("{id} {}: {e} in {}", n.id, n.params_formula));
                assert_eq!(p, n.params, "{id}: params of {}", n.id);
                assert_eq!(
                    eval(&n.flops_formula, &env).unwrap(),
                    n.flops,
                    "{id}: FLOPs of {}",
                    n.id
                );
                for c in &n.caches {
                    assert_eq!(
                        eval(&c.formula, &env).unwrap(),
                        c.bytes,
                        "{id}: cache of {}",
                        n.id
                    );
                }
            }
        }
        let html = page(&data, &PageOptions::default()).unwrap();
        assert!(html.len() <= 2 << 20, "{id}: {} bytes", html.len());
        assert!(!html.contains("<script src") && !html.contains("<link rel=\"stylesheet\""));
    }
}
