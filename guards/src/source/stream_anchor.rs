//! A stream's anchor must be the statement that passes the value on: a line of a function's
//! body that binds, returns or calls with it, not a class attribute, an import, a docstring or a
//! function's header that merely names it.

use crate::pysrc::{At, Kind, Module, Sources, Tok};

/// Why `snippet` (found in the source's text) is not such a statement, naming the statements
/// it lies in and the one the guard expected; `None` when one of its occurrences is one.
pub(super) fn not_passing(src: &Sources, snippet: &str, stream: &str) -> Option<String> {
    let found = src.locate(snippet);
    let passing = found
        .iter()
        .any(|occ| occ.iter().any(|&at| passes_on(src, at)));
    // A bare name occurs in every statement that uses it: it pins none of them.
    let bare = !snippet.trim().is_empty()
        && snippet
            .trim()
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if passing && bare {
        let expected = expected(src, stream);
        return Some(format!(
            "`{snippet}` is a name, not a statement; the guard expected {expected}"
        ));
    }
    if passing {
        return None;
    }
    let lies_in = match found.first().and_then(|occ| occ.first()) {
        Some(&at) => format!("lies in {}, {}", src.describe(at), what_it_is(src, at)),
        None => "lies only in a comment".to_string(),
    };
    let expected = expected(src, stream);
    Some(format!(
        "`{snippet}` {lies_in}; the guard expected {expected}"
    ))
}

/// The statement a stream's anchor should quote, for messages.
fn expected(src: &Sources, stream: &str) -> String {
    match carried_statement(src) {
        Some(at) => format!(
            "the statement that passes `{stream}` on, as {} does for the layers' hidden state",
            src.describe(at)
        ),
        None => format!("the statement of forward() that passes `{stream}` on"),
    }
}

fn module<'a, 's>(src: &'a Sources<'s>, (m, _): At) -> &'a Module<'s> {
    &src.modules[m]
}

/// A statement of a function's body that binds, returns or evaluates something other than a
/// lone string (a docstring).
fn passes_on(src: &Sources, at: At) -> bool {
    let m = module(src, at);
    let s = &m.stmts[at.1];
    let lone_string = m.tokens[s.tokens.clone()]
        .iter()
        .all(|t| matches!(t.kind, Tok::Str | Tok::Newline));
    m.enclosing_def(at.1).is_some()
        && matches!(s.kind, Kind::Assign { .. } | Kind::Return(_) | Kind::Other)
        && !lone_string
        && !matches!(m.tok(s.tokens.start), "import" | "from" | "pass")
}

fn what_it_is(src: &Sources, at: At) -> &'static str {
    let m = module(src, at);
    let s = &m.stmts[at.1];
    match s.kind {
        Kind::Def(_) => "a function's header",
        Kind::Class(_) => "a class header",
        Kind::Block => "a block's header",
        _ if m.enclosing_def(at.1).is_none() => match s.parent {
            Some(_) => "a class attribute",
            None => "a module-level line",
        },
        _ => "a docstring or import",
    }
}

/// The first `x = layer(x, …)` that calls the variable of the `for` loop it is in (`for layer
/// in self.layers:`): how the source passes a value from one layer to the next.
fn carried_statement(src: &Sources) -> Option<At> {
    for (mi, m) in src.modules.iter().enumerate() {
        for (k, s) in m.stmts.iter().enumerate() {
            let Kind::Assign {
                targets,
                value,
                aug: false,
            } = &s.kind
            else {
                continue;
            };
            let Some(header) = s.parent.map(|p| m.stmts[p].tokens.start) else {
                continue;
            };
            if m.tok(header) != "for" || m.enclosing_def(k).is_none() {
                continue;
            }
            let names = m.targets(targets.clone());
            let loop_variables = (header + 1..m.stmts[s.parent?].tokens.end)
                .map(|j| m.tok(j))
                .take_while(|t| *t != "in");
            let callee = m.tok(value.start);
            let calls_loop_variable =
                m.tok(value.start + 1) == "(" && loop_variables.into_iter().any(|v| v == callee);
            let reads_target = value
                .clone()
                .any(|j| m.tokens[j].kind == Tok::Name && names.contains(&m.tok(j)));
            if calls_loop_variable && reads_target {
                return Some((mi, k));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
class Model(PreTrainedModel):
    _keys_to_ignore_on_load_unexpected = [r"^mtp.*"]

    def forward(self, hidden_states, position_embeddings=None):
        """Runs `hidden_states = layer(` over the layers."""
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(
                hidden_states, position_embeddings=position_embeddings
            )
        return self.norm(hidden_states)
"#;

    fn check(snippet: &str) -> Option<String> {
        let (n, t) = ("modeling_x.py".to_string(), SRC.to_string());
        not_passing(&Sources::read(&[(&n, &t)]), snippet, "hidden")
    }

    #[test]
    fn the_passing_statement_holds_and_names_elsewhere_do_not() {
        assert_eq!(check("hidden_states = decoder_layer("), None);
        assert_eq!(check("return self.norm(hidden_states)"), None);
        let attr = check("_keys_to_ignore_on_load_unexpected").unwrap();
        assert!(attr.contains("a class attribute"), "{attr}");
        assert!(
            attr.contains("`hidden_states = decoder_layer( …` (modeling_x.py:8)"),
            "{attr}"
        );
        let header = check("position_embeddings=None").unwrap();
        assert!(header.contains("a function's header"), "{header}");
        assert!(check("for decoder_layer in self.layers").is_some());
        // A name that every statement using it holds is no statement.
        let name = check("hidden_states").unwrap();
        assert!(name.contains("is a name, not a statement"), "{name}");
        assert!(name.contains("(modeling_x.py:8)"), "{name}");
        assert!(
            check("hidden_states = layer(")
                .unwrap()
                .contains("docstring")
        );
    }
}
