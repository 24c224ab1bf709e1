//! The approval policy (`--require-approval TOOL,...`): listed tools ask the
//! user before they run — through MCP elicitation when the client supports
//! it. Without elicitation the call is refused, unless the server runs with
//! `--approval-fallback token`: then the answer carries a single-use token
//! that a repeated call passes as `approvalToken` once the user agreed (a
//! guard against accidental calls, not against a model that replays it).

use serde_json::{json, Map, Value};

use super::approval_tokens::{TOKEN_ARG, TOKEN_LIFETIME};
use super::era::Era;
use super::outbound::Outbound;
use super::request::ConnState;
use crate::sync::MutexExt;
use crate::tools::ToolOutput;

/// What to do with a call to a tool that needs approval.
pub enum Verdict {
    /// Run it (with these arguments, the token removed).
    Run(Value),
    /// Do not run it; answer this instead.
    Answer(ToolOutput),
}

/// A canonical text of a call: tool name and arguments (keys sorted).
fn fingerprint(tool: &str, args: &Map<String, Value>) -> String {
    // serde_json's Map is ordered by key, so this is canonical.
    format!("{tool}\u{0}{}", Value::Object(args.clone()))
}

/// Decides whether `tool` may run with `arguments` now.
pub(crate) async fn check(
    conn: &ConnState,
    out: &Outbound,
    era: Era,
    tool: &str,
    arguments: Value,
) -> Verdict {
    let Value::Object(args) = arguments else {
        return Verdict::Run(arguments);
    };
    // The same call spelled in snake_case is the same call.
    let mut args = crate::tools::camel_case_keys(args);
    let given = args
        .remove(TOKEN_ARG)
        .or_else(|| args.remove("approval_token"));
    let print = fingerprint(tool, &args);
    if let Some(token) = given {
        let token = token.as_str().unwrap_or_default().to_string();
        return match conn.approvals.take(&token) {
            Some(p) if p == print => Verdict::Run(Value::Object(args)),
            Some(_) => Verdict::Answer(ToolOutput::error(format!(
                "The approvalToken was issued for a different call of '{tool}' (other arguments); \
                 it is now used up. Call again without approvalToken to get a new one."
            ))),
            None => Verdict::Answer(ToolOutput::error(format!(
                "The approvalToken is unknown, already used or expired (tokens last {} minutes \
                 and work once). Call '{tool}' again without approvalToken to get a new one.",
                TOKEN_LIFETIME.as_secs() / 60
            ))),
        };
    }

    // Form elicitation needs a legacy session whose client supports forms
    // (`elicitation: {}` or `{form: ...}`; a URL-only client cannot answer).
    let can_elicit = era == Era::Legacy && {
        let lc = conn.lifecycle.guard();
        match lc.client_capabilities.get("elicitation") {
            Some(Value::Object(e)) => e.is_empty() || e.contains_key("form"),
            _ => false,
        }
    };
    let shown_args = serde_json::to_string_pretty(&Value::Object(args.clone())).unwrap_or_default();
    if can_elicit {
        let params = json!({
            "message": format!("The agent wants to run the tool '{tool}' with these arguments:\n{shown_args}\nAllow it?"),
            "requestedSchema": {
                "type": "object",
                "properties": { "approve": { "type": "boolean", "title": "Allow this call", "default": true } },
                "required": ["approve"]
            }
        });
        match conn.request_client(out, "elicitation/create", params).await {
            Ok(r) => {
                let accepted = r.get("action").and_then(Value::as_str) == Some("accept")
                    && r.pointer("/content/approve").and_then(Value::as_bool) != Some(false);
                return if accepted {
                    Verdict::Run(Value::Object(args))
                } else {
                    Verdict::Answer(ToolOutput::error(format!(
                        "The user did not approve running '{tool}'. Do not retry it unless they ask you to."
                    )))
                };
            }
            Err(e) => tracing::info!(error = %e, "elicitation failed"),
        }
    }
    if !conn.engine.config.approval_token_fallback {
        // Without a way to ask the user, a token would be an approval the
        // model grants itself: refuse unless the user chose that fallback.
        let why = if can_elicit {
            "the client did not answer the approval question"
        } else {
            "this client cannot ask its user (it does not support MCP form elicitation)"
        };
        return Verdict::Answer(ToolOutput::error(format!(
            "[APPROVAL REQUIRED] The tool '{tool}' needs the user's approval before it runs \
             (--require-approval), but {why}, so the call is refused. Tell the user what you \
             wanted to run:\n{shown_args}\nThey can do it themselves, use a client with \
             elicitation, or start the server with --approval-fallback token."
        )));
    }
    let token = conn.approvals.issue(print);
    let minutes = TOKEN_LIFETIME.as_secs() / 60;
    // Text only: a structuredContent here would have to match the tool's
    // own outputSchema, which describes the tool's result, not this answer.
    ToolOutput::error(format!(
        "[APPROVAL REQUIRED] The tool '{tool}' needs the user's approval before it runs. Show \
         the user this call:\n{shown_args}\nIf they approve, call '{tool}' again with exactly \
         the same arguments plus \"{TOKEN_ARG}\": \"{token}\" (single use, valid {minutes} minutes)."
    ))
    .into_verdict()
}

impl ToolOutput {
    fn into_verdict(self) -> Verdict {
        Verdict::Answer(self)
    }
}
