//! The first line of every answer: does the deployment fit, and when it does not, what
//! overflows and by how much. A plan that does not fit gets no time or throughput figures (a
//! step that cannot run has no duration).

use serde::Serialize;

use crate::memory::MemoryPlan;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Fit {
    Fits,
    DoesNotFit,
}

impl Fit {
    pub fn name(self) -> &'static str {
        match self {
            Fit::Fits => "FITS",
            Fit::DoesNotFit => "DOES NOT FIT",
        }
    }
}

/// One thing that does not fit on a GPU: what it needs against what it has.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overflow {
    /// `weights` (over the usable memory), `kv_per_request` (one request's cache over what the
    /// weights leave), `decode_batch` (the requests asked for over those the budget holds),
    /// `prefill_batch` (over the prefill batch cap).
    pub what: &'static str,
    /// `bytes` or `requests`.
    pub unit: &'static str,
    pub needs: i128,
    pub available: i128,
    pub over: i128,
}

/// What overflows one GPU of the tightest stage, the first cause only (weights that do not
/// fit leave no budget to compare a cache with).
pub fn overflows(m: &MemoryPlan, decode_batch: Option<i128>, prefill_batch: i128) -> Vec<Overflow> {
    let of = |what, unit, needs: i128, available: i128| Overflow {
        what,
        unit,
        needs,
        available,
        over: needs - available,
    };
    let mut v = Vec::new();
    if m.kv_budget_bytes <= 0 {
        v.push(of(
            "weights",
            "bytes",
            m.weights_bytes_per_gpu,
            m.usable_bytes,
        ));
        return v;
    }
    if m.max_decode_requests < 1 {
        v.push(of(
            "kv_per_request",
            "bytes",
            m.kv_bytes_per_request_per_gpu,
            m.kv_budget_bytes,
        ));
        return v;
    }
    if let Some(b) = decode_batch
        && b > m.max_decode_requests
    {
        v.push(of("decode_batch", "requests", b, m.max_decode_requests));
    }
    if prefill_batch > m.prefill_batch_cap {
        v.push(of(
            "prefill_batch",
            "requests",
            prefill_batch,
            m.prefill_batch_cap,
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(weights: i128, usable: i128, kv: i128) -> MemoryPlan {
        let budget = usable - weights;
        MemoryPlan {
            memory_bytes: usable,
            usable_fraction: 1.0,
            usable_bytes: usable,
            weights_bytes_per_gpu: weights,
            weights_bytes_per_gpu_by_stage: vec![weights],
            kv_budget_bytes: budget,
            context: 2048,
            kv_bytes_per_request: kv,
            kv_bytes_per_request_per_gpu: kv,
            max_decode_requests: budget.max(0) / kv,
            max_decode_requests_total: budget.max(0) / kv,
            fits: budget > 0 && budget / kv > 0,
            prefill_tokens: 1024,
            prefill_activation_bytes_per_token: 1,
            prefill_logits_bytes_per_request: 0,
            prefill_batch_cap: 4,
        }
    }

    #[test]
    fn each_cause_says_what_it_needs_and_what_there_is() {
        let o = overflows(&plan(120, 100, 1), None, 1);
        assert_eq!(o.len(), 1);
        assert_eq!(
            (o[0].what, o[0].needs, o[0].available, o[0].over),
            ("weights", 120, 100, 20)
        );
        let o = overflows(&plan(90, 100, 30), None, 1);
        assert_eq!((o[0].what, o[0].over), ("kv_per_request", 20));
        let o = overflows(&plan(50, 100, 10), Some(8), 6);
        assert_eq!(o.len(), 2);
        assert_eq!(
            (o[0].what, o[0].needs, o[0].available),
            ("decode_batch", 8, 5)
        );
        assert_eq!((o[1].what, o[1].over), ("prefill_batch", 2));
        assert!(overflows(&plan(50, 100, 10), Some(5), 4).is_empty());
    }
}
