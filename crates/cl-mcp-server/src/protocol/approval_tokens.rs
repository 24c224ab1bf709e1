//! A connection's outstanding approval tokens (`--require-approval` with
//! `--approval-fallback token`): single-use, each bound to one call's
//! fingerprint, valid for [`TOKEN_LIFETIME`]; the argument that carries
//! one, and the schema of a tool that takes it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::sync::MutexExt;

/// How long an approval token stays valid.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// The argument carrying an approval token.
pub const TOKEN_ARG: &str = "approvalToken";

/// Outstanding approval tokens of one connection.
#[derive(Default)]
pub struct ApprovalTokens {
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl ApprovalTokens {
    /// Takes `token` (valid or not, it is used up): the fingerprint it was
    /// issued for, unless unknown or expired.
    pub fn take(&self, token: &str) -> Option<String> {
        let mut tokens = self.tokens.guard();
        tokens.retain(|_, (_, at)| at.elapsed() < TOKEN_LIFETIME);
        tokens.remove(token).map(|(print, _)| print)
    }

    /// Issues a new token for the call with fingerprint `print`.
    pub fn issue(&self, print: String) -> String {
        let token = super::random_token();
        self.tokens
            .guard()
            .insert(token.clone(), (print, Instant::now()));
        token
    }
}

/// The input schema of a tool that needs approval: its own plus `approvalToken`.
pub fn schema_with_token(mut schema: Value) -> Value {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            TOKEN_ARG.into(),
            json!({"type": "string", "description": "Single-use token from an approval_required answer, after the user approved this exact call."}),
        );
    } else if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "properties".into(),
            json!({ TOKEN_ARG: {"type": "string", "description": "Single-use approval token."} }),
        );
    }
    schema
}
