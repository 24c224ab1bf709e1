//! The protocol layer's error: a JSON-RPC error a method handler answers
//! with (code, message, data). Every layer below the engine that can fail a
//! request returns it, so the engine writes one kind of error line.

use serde_json::Value;

use super::jsonrpc::{self, RequestId};

/// A JSON-RPC error produced by a method handler.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message} ({code}): {data}")]
pub struct McpError {
    pub code: i64,
    pub message: &'static str,
    pub data: Value,
}

impl McpError {
    pub fn invalid_params(data: impl Into<String>) -> Self {
        McpError {
            code: jsonrpc::INVALID_PARAMS,
            message: "Invalid params",
            data: Value::String(data.into()),
        }
    }

    /// A -32603 whose data says what went wrong.
    pub fn internal(data: impl Into<String>) -> Self {
        McpError {
            code: jsonrpc::INTERNAL_ERROR,
            message: "Internal error",
            data: Value::String(data.into()),
        }
    }

    pub fn into_line(self, id: &RequestId) -> String {
        jsonrpc::error(Some(id), self.code, self.message, &self.data)
    }
}

impl McpError {
    /// -32601 whose data says why the method is not there.
    pub fn method_not_found(data: impl Into<Value>) -> Self {
        McpError {
            code: jsonrpc::METHOD_NOT_FOUND,
            message: "Method not found",
            data: data.into(),
        }
    }
}
