//! What the op families' unit tests bind arguments with: integers and flags by name.

use std::collections::HashMap;

use super::{Args, OpError, lit};
use crate::q::Q;

pub(crate) struct Bound(
    pub(crate) HashMap<&'static str, i128>,
    pub(crate) HashMap<&'static str, Vec<i128>>,
);

/// Integer arguments by name, as an op's unit test binds them.
pub(crate) fn args(kv: &[(&'static str, i128)]) -> Bound {
    Bound(kv.iter().copied().collect(), HashMap::new())
}

impl Bound {
    /// The same arguments with a list argument bound too.
    pub(crate) fn list(mut self, name: &'static str, v: &[i128]) -> Bound {
        self.1.insert(name, v.to_vec());
        self
    }
}

impl Args for Bound {
    fn int(&self, name: &str) -> Result<Q, OpError> {
        self.opt_int(name)?.ok_or_else(|| OpError {
            code: "A001",
            message: name.into(),
            hint: None,
        })
    }
    fn opt_int(&self, name: &str) -> Result<Option<Q>, OpError> {
        Ok(self.0.get(name).map(|v| lit(*v)))
    }
    fn flag(&self, name: &str) -> Result<bool, OpError> {
        Ok(self.0.get(name).is_some_and(|v| *v != 0))
    }
    fn text(&self, _: &str) -> Result<Option<String>, OpError> {
        Ok(None)
    }
    fn int_list(&self, name: &str) -> Result<Option<Vec<i128>>, OpError> {
        Ok(self.1.get(name).cloned())
    }
    fn shape(&self) -> Result<Option<Vec<Q>>, OpError> {
        Ok(None)
    }
}
