//! The four tools the OpenAI loop offers. They run inside the worker, so every path goes through
//! the workspace's checks (no absolute paths, no `..`, no symlink escapes, writes only in the
//! writable area); `run_validate` runs sandboxed like any agent process.

use std::time::Duration;

use harch_sandbox::{RunOptions, Workspace};
use serde_json::{Value, json};

/// What one tool answer may put into the conversation.
const MAX_TOOL_OUTPUT: usize = 200 * 1024;

pub(crate) fn schema() -> Value {
    let tool = |name: &str, description: &str, parameters: Value| json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}});
    let path = json!({"type": "string", "description": "path relative to the workspace root"});
    json!([
        tool(
            "read_file",
            "Read a text file in the workspace.",
            json!({"type": "object", "properties": {"path": path}, "required": ["path"]})
        ),
        tool(
            "list_files",
            "List files under a workspace directory (default: the root), recursively.",
            json!({"type": "object", "properties": {"path": path}})
        ),
        tool(
            "write_file",
            "Create or replace a file under specs/models/ or specs/components/drafts/.",
            json!({"type": "object", "properties": {"path": path, "content": {"type": "string"}},
                    "required": ["path", "content"]})
        ),
        tool(
            "run_validate",
            "Run the full validation and return its JSON report.",
            json!({"type": "object", "properties": {}})
        ),
    ])
}

/// Runs one call and returns the text for the tool message. Tool errors are answers too: the
/// model reads them and corrects itself.
pub(crate) async fn call(ws: &Workspace, name: &str, arguments: &str, label: &str) -> String {
    let args: Value = match serde_json::from_str(if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    }) {
        Ok(v) => v,
        Err(e) => return format!("error: arguments are not valid JSON: {e}"),
    };
    let path = args["path"].as_str();
    match name {
        "read_file" => match path {
            None => "error: `path` is required".into(),
            Some(p) => read_file(ws, p),
        },
        "list_files" => list_files(ws, path.unwrap_or(".")),
        "write_file" => match (path, args["content"].as_str()) {
            (Some(p), Some(c)) => write_file(ws, p, c),
            _ => "error: `path` and `content` are required".into(),
        },
        "run_validate" => run_validate(ws, label).await,
        other => format!(
            "error: unknown tool `{other}`; tools are read_file, list_files, write_file, run_validate"
        ),
    }
}

fn cap(mut s: String) -> String {
    if s.len() > MAX_TOOL_OUTPUT {
        let mut end = MAX_TOOL_OUTPUT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("\n[truncated]");
    }
    s
}

fn read_file(ws: &Workspace, rel: &str) -> String {
    match ws.resolve_read(rel) {
        Err(e) => format!("error: {e}"),
        Ok(p) if p.is_dir() => format!("error: {rel} is a directory; use list_files"),
        Ok(p) => match std::fs::read(&p) {
            Ok(bytes) => cap(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) => format!("error: reading {rel}: {e}"),
        },
    }
}

fn list_files(ws: &Workspace, rel: &str) -> String {
    let dir = match ws.resolve_read(rel) {
        Ok(d) => d,
        Err(e) => return format!("error: {e}"),
    };
    let root = ws.root();
    let mut out = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(&root).unwrap_or(&p).display().to_string());
            }
        }
    }
    out.sort();
    cap(out.join("\n"))
}

fn write_file(ws: &Workspace, rel: &str, content: &str) -> String {
    let path = match ws.resolve_write(rel) {
        Ok(p) => p,
        Err(e) => return format!("error: {e}"),
    };
    let result = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("harch-tmp");
        std::fs::write(&tmp, content)?;
        std::fs::rename(&tmp, &path)
    })();
    match result {
        Ok(()) => format!("wrote {} bytes to {rel}", content.len()),
        Err(e) => format!("error: writing {rel}: {e}"),
    }
}

async fn run_validate(ws: &Workspace, label: &str) -> String {
    let validate = ws.bin_dir().join("validate");
    if !validate.exists() {
        return "error: no validate command is staged in this workspace".into();
    }
    let cmd = ws.command(validate);
    let mut opts = RunOptions::new(
        &ws.logs_dir(),
        &format!("{label}.validate"),
        Duration::from_secs(300),
    );
    opts.max_stdout_bytes = MAX_TOOL_OUTPUT as u64;
    match cmd.run(&opts).await {
        Err(e) => format!("error: {e}"),
        Ok(r) => {
            let out = std::fs::read_to_string(&r.stdout_path).unwrap_or_default();
            let err = std::fs::read_to_string(&r.stderr_path).unwrap_or_default();
            let mut answer = format!("exit code: {:?}\n{out}", r.exit_code);
            if r.timed_out {
                answer.push_str("\n[validate timed out]");
            }
            if !err.trim().is_empty() {
                answer.push_str(&format!("\nstderr:\n{err}"));
            }
            cap(answer)
        }
    }
}
