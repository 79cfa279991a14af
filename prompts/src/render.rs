//! The template environment: the templates under `templates/`, compiled in, rendered strictly
//! (an undefined variable is an error, not an empty string) and without any escaping.

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use crate::size::PromptSize;

const TEMPLATES: &[(&str, &str)] = &[
    ("generate", include_str!("../templates/generate.md.j2")),
    ("review", include_str!("../templates/review.md.j2")),
    ("fix", include_str!("../templates/fix.md.j2")),
];

/// A template's source text (`generate`, `review`, `fix`), for recording which prompt an
/// experiment ran with.
pub fn template_source(name: &str) -> Option<&'static str> {
    TEMPLATES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// A rendered prompt and its size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prompt {
    pub text: String,
    pub size: PromptSize,
}

#[derive(Debug)]
pub struct PromptError(String);

impl std::fmt::Display for PromptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PromptError {}

impl From<minijinja::Error> for PromptError {
    fn from(e: minijinja::Error) -> Self {
        let mut msg = format!("template error: {e}");
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            msg.push_str(&format!(": {s}"));
            source = s.source();
        }
        PromptError(msg)
    }
}

fn environment() -> Result<Environment<'static>, PromptError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()?,
    );
    for (name, source) in TEMPLATES {
        env.add_template(name, source)?;
    }
    Ok(env)
}

/// Renders template `name` with `context`; `fragments` name the parts for the size report.
pub(crate) fn render(
    name: &str,
    context: impl Serialize,
    fragments: Vec<(String, usize)>,
) -> Result<Prompt, PromptError> {
    let env = environment()?;
    let text = env
        .get_template(name)?
        .render(minijinja::value::Serde(&context))?;
    let size = PromptSize::of(&text, fragments);
    Ok(Prompt { text, size })
}
