//! Every subcommand's `--help` ends with examples and the exit-code table, in the style of
//! cargo and uv. The examples live here, in one table, so a test can require one for every
//! subcommand (a new command without examples fails `every_subcommand_has_examples`).

/// Examples per subcommand: (command name, lines of `$ harch-worker …` with a comment).
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "ops",
        "  harch-worker ops                         # every primitive op, its params and FLOPs",
    ),
    (
        "show",
        "  harch-worker show meta-llama/Llama-3.1-8B          # a library model, bundled truth
  harch-worker show my_model.yaml --truth DIR        # a spec file against a truth directory
  harch-worker show Qwen/Qwen3-8B --json             # the summary as JSON",
    ),
    (
        "validate",
        "  harch-worker validate meta-llama/Llama-3.1-8B      # every guard, bundled truth
  harch-worker validate my_model.yaml --truth DIR    # a new spec against fetched truth
  harch-worker validate my_model.yaml --guards weight,shape --json",
    ),
    (
        "explain",
        "  harch-worker explain deepseek-ai/DeepSeek-V3 params_total
  harch-worker explain deepseek-ai/DeepSeek-V3 'params:layers[moe].ffn'   # a component's sum
  harch-worker explain Qwen/Qwen3-8B kv_bytes_per_token
  harch-worker explain deepseek-ai/DeepSeek-V3 decode.estimate_s --gpu B200 --layout attn=dp8,moe=ep8",
    ),
    (
        "analyze",
        "  harch-worker analyze deepseek-ai/DeepSeek-V3 --gpu B200 --layout attn=dp8,moe=ep8
  harch-worker analyze Qwen/Qwen3-8B --gpu H200 --sweep batch=1,8,64 --csv -
  harch-worker analyze openai/gpt-oss-20b --gpu 'H100 SXM' --json",
    ),
    (
        "plan",
        "  harch-worker plan deepseek-ai/DeepSeek-V3 --gpu h100             # the smallest layout that fits
  harch-worker plan Qwen/Qwen3-8B --gpu h100 --max-gpus 1 --context 32K
  harch-worker plan deepseek-ai/DeepSeek-V3 --gpu B200 --price 6.5 --max-tpot 50ms --json",
    ),
    (
        "compare",
        "  harch-worker compare Llama-3.1-8B Qwen3-8B                 # every show figure side by side
  harch-worker compare Llama-3.1-8B Qwen3-8B --gpu h100      # and every analyze figure
  harch-worker compare Qwen/Qwen3-8B Qwen/Qwen3-30B-A3B --bytes --json",
    ),
    (
        "inspect",
        "  harch-worker inspect deepseek-ai/DeepSeek-V3 --out dsv3.html   # one self-contained page
  harch-worker inspect Qwen/Qwen3-8B --compare meta-llama/Llama-3.1-8B --out pair.html
  harch-worker inspect deepseek-ai/DeepSeek-V3 --gpu B200 --layout attn=dp8,moe=ep8 --out d.html
  harch-worker inspect --library --out site/        # every library model and index.html",
    ),
    (
        "models",
        "  harch-worker models                          # specs, architectures, bundled snapshots
  harch-worker models --json",
    ),
    (
        "fetch",
        "  harch-worker fetch Qwen/Qwen3-8B                   # into .harch/truth/Qwen__Qwen3-8B
  harch-worker fetch Qwen/Qwen3-8B --out truth/qwen3 --revision main
  harch-worker fetch Qwen/Qwen3-8B --offline --json  # the bundled snapshot, a JSON report
  harch-worker fetch Qwen/Qwen3-8B --out DIR --force # replace a directory that is not its truth",
    ),
    (
        "snapshot",
        "  harch-worker snapshot .harch/truth/Qwen__Qwen3-8B --out specs/snapshots/Qwen__Qwen3-8B.json.gz",
    ),
    (
        "enqueue",
        "  harch-worker enqueue Qwen/Qwen3-8B                 # generate a spec (default agent)
  harch-worker enqueue Qwen/Qwen3-8B --agent codex --priority 5
  harch-worker enqueue meta-llama/Llama-3.1-8B --kind revalidate --offline
  harch-worker enqueue Qwen/Qwen3-8B --stages fetch,generate,verify --json",
    ),
    (
        "run",
        "  harch-worker run                                   # work until SIGINT/SIGTERM
  harch-worker run --once                            # drain the queue, then exit
  harch-worker run --concurrency 4 --queue redis://127.0.0.1:6379",
    ),
    (
        "status",
        "  harch-worker status                                # every job, as a table
  harch-worker status 01JD3XK4F5Q2W8Y6Z7A9B0C1D2     # one job: stages, attempts, errors
  harch-worker status --json --data-dir /srv/harch",
    ),
    (
        "cancel",
        "  harch-worker cancel 01JD3XK4F5Q2W8Y6Z7A9B0C1D2",
    ),
    (
        "retry",
        "  harch-worker retry 01JD3XK4F5Q2W8Y6Z7A9B0C1D2",
    ),
    (
        "logs",
        "  harch-worker logs 01JD3XK4F5Q2W8Y6Z7A9B0C1D2                 # the job's event log
  harch-worker logs 01JD3XK4F5Q2W8Y6Z7A9B0C1D2 --attempt 2       # one agent run
  harch-worker logs 01JD3XK4F5Q2W8Y6Z7A9B0C1D2 --attempt 2 --show transcript",
    ),
    (
        "revalidate",
        "  harch-worker revalidate --offline                  # the library against its snapshots
  harch-worker revalidate --models Qwen/Qwen3-8B,meta-llama/Llama-3.1-8B
  harch-worker revalidate --offline --json",
    ),
    (
        "bench-queue",
        "  harch-worker bench-queue --jobs 1000 --backends sqlite
  harch-worker bench-queue --backends redis --redis-url redis://127.0.0.1:6379",
    ),
    (
        "prompt",
        "  harch-worker prompt Qwen/Qwen3-8B                  # the generate prompt an agent gets
  harch-worker prompt Qwen/Qwen3-8B --fresh --size-only",
    ),
    (
        "evidence",
        "  harch-worker evidence review.yaml --truth .harch/truth/Qwen__Qwen3-8B
  harch-worker evidence review.yaml --truth DIR --spec my_model.yaml --json",
    ),
    (
        "promote",
        "  harch-worker promote my_block --dry-run --offline
  harch-worker promote my_block --truth .harch/truth/Qwen__Qwen3-8B",
    ),
    (
        "validate-changed",
        "  harch-worker validate-changed --base origin/main --offline
  harch-worker validate-changed --base main --markdown report.md --json",
    ),
    (
        "ablate",
        "  harch-worker ablate --models openai/gpt-oss-20b,deepseek-ai/DeepSeek-V3 --tiers off,weight,all --seeds 3 --agent claude --out ablations/claude
  harch-worker ablate --models Qwen/Qwen3-8B --agent openai --model gpt-5 --wait --wait-timeout 6h
  harch-worker ablate report ablations/claude            # collect finished runs, write the report",
    ),
];

/// The examples of a subcommand, if it has any.
pub fn examples(name: &str) -> Option<&'static str> {
    EXAMPLES.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
}

/// Adds `Examples:` and `Exit codes:` to every subcommand's help.
pub fn decorate(mut cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let text = match examples(&name) {
            Some(e) => format!("Examples:\n{e}\n\n{}", super::exit::TABLE),
            None => super::exit::TABLE.to_string(),
        };
        cmd = cmd.mut_subcommand(&name, |s| s.after_help(text));
    }
    cmd.after_help(format!(
        "Run `harch-worker <COMMAND> --help` for a command's options and examples.\n\n{}",
        super::exit::TABLE
    ))
}
