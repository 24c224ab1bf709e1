//! Requests for client input (SEP-2322). A handler that needs the user or
//! the client's model (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) answers [`InputRequired`] instead of a result, and is run
//! again with the client's responses:
//!
//! - 2026-07-28 (stateless): the answer is an `input_required` result; the
//!   client retries the request with `inputResponses` and the opaque
//!   `requestState`. The state stays here, under a random single-use handle
//!   bound to the request it was issued for, so a client can neither read
//!   nor forge it (a changed handle is simply unknown: `-32602`).
//! - Legacy era: the server sends each request to the client on the call's
//!   stream itself and runs the handler again with the answers.

use std::future::Future;

use serde_json::{json, Map, Value};

use super::era::Era;
use super::error::McpError;
use super::request::{ClientRequestError, RequestCtx};
use crate::tools::{ClientInput, InputRequired};

/// A legacy-era handler may ask for input this many times per request.
const MAX_ROUNDS: usize = 8;

/// Why the legacy era could not get the client's input for a handler.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    #[error("input request '{0}' names no method")]
    NoMethod(String),
    #[error(transparent)]
    Client(#[from] ClientRequestError),
    #[error("gave up after asking the client for input {MAX_ROUNDS} times")]
    TooManyRounds,
}

/// The client's input on a stateless retry: `inputResponses` and the state
/// behind `requestState`. Legacy requests carry none.
fn client_input(
    req: &RequestCtx,
    params: &Map<String, Value>,
    binding: &str,
) -> Result<ClientInput, McpError> {
    if req.era == Era::Legacy {
        return Ok(ClientInput::default());
    }
    let responses = match params.get("inputResponses") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => {
            return Err(McpError::invalid_params(
                "inputResponses must be an object mapping each input request's key to the client's result",
            ))
        }
    };
    let state = match params.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(token)) => Some(req.conn.engine.input_states.take(binding, token)?),
        Some(_) => {
            return Err(McpError::invalid_params(
                "requestState must be the string this server sent",
            ))
        }
    };
    Ok(ClientInput { responses, state })
}

/// Runs `attempt` until it answers. `binding` names the request (method and
/// target) so a state issued for one cannot be replayed on another. A
/// legacy-era failure to get the client's input is `Ok(Err(InputError))`.
pub(crate) async fn answer<F, Fut>(
    req: &RequestCtx,
    params: &Map<String, Value>,
    binding: &str,
    mut attempt: F,
) -> Result<Result<Value, InputError>, McpError>
where
    F: FnMut(ClientInput) -> Fut,
    Fut: Future<Output = Result<Result<Value, InputRequired>, McpError>>,
{
    let mut input = client_input(req, params, binding)?;
    for _ in 0..MAX_ROUNDS {
        let needed = match attempt(input).await? {
            Ok(result) => return Ok(Ok(result)),
            Err(needed) => needed,
        };
        if matches!(req.era, Era::Modern { .. }) {
            let mut result = json!({
                "resultType": "input_required",
                "inputRequests": needed.requests,
            });
            if let Some(state) = needed.state {
                result["requestState"] = json!(req.conn.engine.input_states.put(binding, state));
            }
            return Ok(Ok(result));
        }
        let mut responses = Map::new();
        for (key, request) in needed.requests {
            let Some(method) = request.get("method").and_then(Value::as_str) else {
                return Ok(Err(InputError::NoMethod(key)));
            };
            let params = request.get("params").cloned().unwrap_or(json!({}));
            match req.conn.request_client(&req.out, method, params).await {
                Ok(v) => {
                    responses.insert(key, v);
                }
                Err(e) => return Ok(Err(InputError::Client(e))),
            }
        }
        input = ClientInput {
            responses: Some(responses),
            state: needed.state,
        };
    }
    Ok(Err(InputError::TooManyRounds))
}
