//! The stateless era's `requestState`s (SEP-2322): the state of a request
//! that answered `input_required`, kept here under a random single-use
//! handle bound to the request it was issued for, so a client can neither
//! read nor forge it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::error::McpError;
use crate::sync::MutexExt;

/// How long a `requestState` handle stays valid.
const STATE_LIFETIME: Duration = Duration::from_secs(600);
/// At most this many outstanding handles; the oldest go first.
const MAX_STATES: usize = 1024;
struct Stored {
    binding: String,
    state: Value,
    at: Instant,
}

/// Outstanding `requestState`s of the stateless era.
#[derive(Default)]
pub(crate) struct StateStore {
    states: Mutex<HashMap<String, Stored>>,
}

impl StateStore {
    pub(crate) fn put(&self, binding: &str, state: Value) -> String {
        let token = super::random_token();
        let mut states = self.states.guard();
        states.retain(|_, s| s.at.elapsed() < STATE_LIFETIME);
        while states.len() >= MAX_STATES {
            let oldest = states
                .iter()
                .min_by_key(|(_, s)| s.at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => states.remove(&k),
                None => break,
            };
        }
        states.insert(
            token.clone(),
            Stored {
                binding: binding.to_string(),
                state,
                at: Instant::now(),
            },
        );
        token
    }

    pub(crate) fn take(&self, binding: &str, token: &str) -> Result<Value, McpError> {
        let mut states = self.states.guard();
        states.retain(|_, s| s.at.elapsed() < STATE_LIFETIME);
        match states.remove(token) {
            Some(s) if s.binding == binding => Ok(s.state),
            _ => Err(McpError::invalid_params(
                "requestState is unknown, altered, already used or expired: send the request again \
                 without inputResponses and requestState",
            )),
        }
    }
}
