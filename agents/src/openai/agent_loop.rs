//! The loop: send the conversation, run the tools the model asks for, answer each call, repeat
//! until the model stops calling tools or a cap (steps, tokens, cost, wall time) is hit. Every
//! step is appended to the transcript before the next request. A request the provider refuses
//! for now (429, 5xx, a dropped connection) is sent again after a backoff; the conversation goes
//! on where it was.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use serde_json::json;

use super::wire::{ChatRequest, ChatResponse, Message};
use super::{OpenAiBackend, tools};
use crate::transcript::Transcript;
use crate::{AgentError, AgentOutcome, AgentRequest, Failure, FailureKind, Usage};

#[derive(Default)]
struct State {
    usage: Usage,
    /// Known only when the backend has the provider's prices.
    cost_usd: Option<f64>,
    turns: u32,
    claimed_success: bool,
    final_message: Option<String>,
    failure: Option<Failure>,
}

pub(super) async fn run(
    backend: &OpenAiBackend,
    req: &AgentRequest<'_>,
) -> Result<AgentOutcome, AgentError> {
    let ws = req.workspace;
    let model = req.model.unwrap_or(&backend.config.default_model);
    let mut transcript =
        Transcript::create(&ws.logs_dir().join(format!("{}.openai.jsonl", req.label)))?;
    transcript.record(
        &json!({"event": "start", "model": model, "base_url": backend.config.base_url,
        "max_turns": req.limits.max_turns, "max_tokens": req.limits.max_tokens}),
    )?;
    let before = ws.snapshot_writable();
    let started = Instant::now();
    let mut state = State::default();
    let steps = steps(backend, req, model, &mut transcript, &mut state);
    match tokio::time::timeout(req.limits.wall_time, steps).await {
        Ok(result) => result?,
        Err(_) => {
            state.claimed_success = false;
            state.failure = Some(Failure::new(
                FailureKind::Timeout,
                format!(
                    "stopped after the wall-clock limit of {:?}",
                    req.limits.wall_time
                ),
            ));
        }
    }
    transcript.record(
        &json!({"event": "end", "claimed_success": state.claimed_success,
        "failure": state.failure, "usage": state.usage, "cost_usd": state.cost_usd,
        "turns": state.turns}),
    )?;
    Ok(AgentOutcome {
        backend: "openai".into(),
        model: Some(model.to_string()),
        exit_code: None,
        claimed_success: state.claimed_success,
        turns: Some(state.turns),
        usage: Some(state.usage),
        cost_usd: state.cost_usd,
        wall_ms: started.elapsed().as_millis() as u64,
        transcript: transcript.path().to_path_buf(),
        stderr_log: None,
        files_changed: ws.snapshot_writable().changed_since(&before),
        final_message: state.final_message,
        failure: state.failure,
    })
}

async fn steps(
    backend: &OpenAiBackend,
    req: &AgentRequest<'_>,
    model: &str,
    transcript: &mut Transcript,
    st: &mut State,
) -> Result<(), AgentError> {
    let tools = tools::schema();
    let mut messages = vec![Message::user(req.prompt)];
    for step in 1..=req.limits.max_turns {
        if st.usage.total() >= req.limits.max_tokens {
            st.failure = Some(Failure::new(
                FailureKind::BudgetExceeded,
                format!(
                    "used {} tokens of {}",
                    st.usage.total(),
                    req.limits.max_tokens
                ),
            ));
            return Ok(());
        }
        let body = ChatRequest {
            model,
            messages: &messages,
            tools: &tools,
            tool_choice: "auto",
            max_tokens: None,
        };
        let (sent, waits) = send(backend, &body).await;
        for (failure, wait_ms) in &waits {
            transcript
                .record(&json!({"step": step, "retry_after_error": failure, "wait_ms": wait_ms}))?;
        }
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                transcript
                    .record(&json!({"step": step, "error": e.failure, "retries": waits.len()}))?;
                st.failure = Some(e.failure);
                return Ok(());
            }
        };
        st.turns = step;
        if let Some(u) = &response.usage {
            st.usage.add(Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
                cached_input_tokens: u
                    .prompt_tokens_details
                    .as_ref()
                    .map_or(0, |d| d.cached_tokens),
            });
        }
        if let Some(price) = &backend.config.price {
            let cost = price.cost(&st.usage);
            st.cost_usd = Some(cost);
            if let Some(cap) = req.limits.max_cost_usd
                && cost >= cap
            {
                transcript.record(&json!({"step": step, "usage": st.usage, "cost_usd": cost}))?;
                st.failure = Some(Failure::new(
                    FailureKind::BudgetExceeded,
                    format!("spent ${cost:.4} of the run's cap ${cap:.4} after {step} responses"),
                ));
                return Ok(());
            }
        }
        let Some(choice) = response.choices.into_iter().next() else {
            st.failure = Some(Failure::new(
                FailureKind::AgentError,
                "response has no choices",
            ));
            return Ok(());
        };
        let message = choice.message;
        transcript.record(&json!({"step": step, "finish_reason": choice.finish_reason,
            "usage": st.usage, "message": message}))?;
        messages.push(message.clone());
        if message.tool_calls.is_empty() {
            st.final_message = message.content;
            match choice.finish_reason.as_deref() {
                None | Some("stop") => st.claimed_success = true,
                Some(other) => {
                    st.failure = Some(Failure::new(
                        FailureKind::AgentError,
                        format!("the model stopped with finish_reason {other}"),
                    ))
                }
            }
            return Ok(());
        }
        for call in &message.tool_calls {
            let answer = tools::call(
                req.workspace,
                &call.function.name,
                &call.function.arguments,
                req.label,
            )
            .await;
            transcript.record(
                &json!({"step": step, "tool": call.function.name, "tool_call_id": call.id,
                "arguments": call.function.arguments, "result": answer}),
            )?;
            messages.push(Message::tool(&call.id, answer));
        }
    }
    st.failure = Some(Failure::new(
        FailureKind::MaxTurns,
        format!("reached the step limit of {}", req.limits.max_turns),
    ));
    Ok(())
}

fn backoff(p: &super::RetryPolicy) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(p.base_delay)
        .with_max_delay(p.max_delay)
        .with_max_times(p.max_retries)
        .with_jitter()
}

/// A server that was never reached is asked again after this long, not after the backoff: if
/// it is coming up, it is up by then; if not, waiting longer does not help.
const UNREACHABLE_WAIT: Duration = Duration::from_millis(500);

/// Sends one request, retried by its failure's cause ([`harch_net::Budget`], within the retry
/// policy's cap): a refused connection or a name that does not resolve once after a short
/// wait, 429 and 5xx with backoff (or the server's `Retry-After`), a 401/403/404 never. The
/// error's message states how many requests were sent. Also returns each retried failure and
/// the wait before its retry.
async fn send(
    backend: &OpenAiBackend,
    body: &ChatRequest<'_>,
) -> (Result<ChatResponse, PostError>, Vec<(Failure, u128)>) {
    let policy = &backend.config.retry;
    let mut waits = Vec::new();
    let mut delays = backoff(policy).build();
    let mut sent: u32 = 0;
    loop {
        sent += 1;
        let mut e = match post(backend, body).await {
            Ok(r) => return (Ok(r), waits),
            Err(e) => e,
        };
        let retryable = matches!(
            e.failure.kind,
            FailureKind::RateLimited | FailureKind::Transient | FailureKind::Unreachable
        ) && e.cause.transient();
        let allowed = backend
            .config
            .budget
            .retries(e.cause)
            .min(policy.max_retries as u32);
        let next = delays.next();
        if !retryable || sent > allowed || next.is_none() {
            let requests = if sent == 1 {
                "1 request".to_string()
            } else {
                format!("{sent} requests")
            };
            e.failure.message = format!("{} ({requests})", e.failure.message);
            return (Err(e), waits);
        }
        let wait = match e.cause.unreachable() {
            true => UNREACHABLE_WAIT.min(policy.max_delay),
            false => e
                .retry_after
                .map_or(next.unwrap_or_default(), |r| r.min(policy.max_delay)),
        };
        waits.push((e.failure.clone(), wait.as_millis()));
        tokio::time::sleep(wait).await;
    }
}

/// A request that failed, and how long the server asked us to wait before the next one.
#[derive(Debug)]
struct PostError {
    failure: Failure,
    cause: harch_net::Cause,
    retry_after: Option<Duration>,
}

impl From<Failure> for PostError {
    fn from(failure: Failure) -> Self {
        PostError {
            failure,
            cause: harch_net::Cause::Other,
            retry_after: None,
        }
    }
}

/// The failure of a request that got no answer, by its cause: one the endpoint must be fixed
/// for (refused, DNS, TLS, no answer to connect) is `Unreachable`, the others transient.
fn no_answer(url: &str, doing: &str, e: &reqwest::Error) -> PostError {
    let cause = harch_net::Cause::of(e, e.is_timeout(), e.is_connect());
    let kind = match cause.unreachable() {
        true => FailureKind::Unreachable,
        false => FailureKind::Transient,
    };
    PostError {
        failure: Failure::new(
            kind,
            format!(
                "{doing} {url}: {} (check agent.openai_base_url / HARCH_OPENAI_BASE_URL)",
                harch_net::explain(cause, url)
            ),
        ),
        cause,
        retry_after: None,
    }
}

/// `Retry-After` in seconds (an HTTP date is left to our own backoff).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

async fn post(backend: &OpenAiBackend, body: &ChatRequest<'_>) -> Result<ChatResponse, PostError> {
    let url = format!(
        "{}/chat/completions",
        backend.config.base_url.trim_end_matches('/')
    );
    let mut request = backend.http.post(&url).json(body);
    if let Some(key) = &backend.api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .map_err(|e| no_answer(&url, "POST", &e))?;
    let status = response.status();
    let wait = retry_after(response.headers());
    let text = response
        .text()
        .await
        .map_err(|e| no_answer(&url, "reading the response of", &e))?;
    if !status.is_success() {
        let kind = match status.as_u16() {
            429 => FailureKind::RateLimited,
            401 | 403 => FailureKind::Auth,
            404 => FailureKind::Unreachable,
            s if s >= 500 || s == 408 => FailureKind::Transient,
            _ => FailureKind::AgentError,
        };
        let cause = harch_net::Cause::Status(status.as_u16());
        let snippet: String = text.chars().take(500).collect();
        return Err(PostError {
            failure: Failure::new(
                kind,
                format!("HTTP {status} from {url}: {snippet} ({})", cause.hint(&url)),
            ),
            cause,
            retry_after: wait,
        });
    }
    serde_json::from_str(&text).map_err(|e| {
        Failure::new(
            FailureKind::AgentError,
            format!("response of {url} is not a chat completion: {e}"),
        )
        .into()
    })
}
