//! Filled by issue 11.

use harch_engine::Analysis;
use harch_engine::ir::ModelIr;

use crate::report::Diagnostic;
use crate::truth::Truth;

pub fn check(_ir: &ModelIr, _a: &Analysis, _truth: &Truth) -> Vec<Diagnostic> {
    Vec::new()
}
