//! A stateless POST's routing headers checked against its body:
//! `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and (SEP-2243)
//! `Mcp-Param-*`, with the `=?base64?...?=` form of values that are not
//! plain visible ASCII.

use axum::http::HeaderMap;
use serde_json::Value;

use super::responses::header_str;

/// How a stateless POST's routing headers disagree with its body: the
/// `-32020` error's data.
#[derive(Debug, thiserror::Error)]
pub(super) enum HeaderError {
    #[error("The {0} header appears more than once")]
    Repeated(String),
    #[error("The MCP-Protocol-Version header ({header}) must equal _meta's io.modelcontextprotocol/protocolVersion ({meta})")]
    Version { header: String, meta: String },
    #[error("The Mcp-Method header ({header}) must equal the body's method ({body})")]
    Method { header: String, body: String },
    #[error("The Mcp-Name header must equal the body's params.{key} ({expected})")]
    Name { key: String, expected: String },
    #[error("The Mcp-Param-{name} header is set but the argument `{param}` is absent")]
    ParamWithoutArgument { name: String, param: String },
    #[error("The argument `{param}` must be mirrored in an Mcp-Param-{name} header")]
    ArgumentWithoutParam { name: String, param: String },
    #[error("The Mcp-Param-{0} header is not valid =?base64?...?= UTF-8")]
    ParamEncoding(String),
    #[error("The Mcp-Param-{name} header must equal the argument `{param}`")]
    ParamMismatch { name: String, param: String },
}

/// `MCP-Protocol-Version`, `Mcp-Method` and (for named methods) `Mcp-Name`
/// must repeat what the body says.
pub(super) fn check_modern_headers(headers: &HeaderMap, body: &Value) -> Result<(), HeaderError> {
    for name in ["mcp-protocol-version", "mcp-method", "mcp-name"] {
        if headers.get_all(name).iter().count() > 1 {
            return Err(HeaderError::Repeated(name.to_string()));
        }
    }
    let meta_version = body
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str);
    let header_version = header_str(headers, "mcp-protocol-version");
    if header_version.is_none() || header_version != meta_version {
        return Err(HeaderError::Version {
            header: header_version.unwrap_or("missing").to_string(),
            meta: meta_version.unwrap_or("missing").to_string(),
        });
    }
    let method = body.get("method").and_then(Value::as_str);
    if header_str(headers, "mcp-method") != method {
        return Err(HeaderError::Method {
            header: header_str(headers, "mcp-method")
                .unwrap_or("missing")
                .to_string(),
            body: method.unwrap_or("missing").to_string(),
        });
    }
    let name_key = match method {
        Some("tools/call" | "prompts/get") => Some("name"),
        Some("resources/read") => Some("uri"),
        // The tasks extension routes by task (SEP-2663).
        Some("tasks/get" | "tasks/update" | "tasks/cancel") => Some("taskId"),
        _ => None,
    };
    if let Some(key) = name_key {
        if let Some(expected) = body
            .pointer(&format!("/params/{key}"))
            .and_then(Value::as_str)
        {
            let given = header_str(headers, "mcp-name").and_then(decode_header_value);
            if given.as_deref() != Some(expected) {
                return Err(HeaderError::Name {
                    key: key.to_string(),
                    expected: expected.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// SEP-2243: each argument of a `tools/call` whose schema property carries
/// `x-mcp-header: NAME` must be mirrored in an `Mcp-Param-NAME` header
/// (absent exactly when the argument is absent or null), equal to it once
/// decoded. Tools without such parameters need no headers.
pub(super) fn check_param_headers(
    headers: &HeaderMap,
    body: &Value,
    tools: &crate::tools::ToolRegistry,
) -> Result<(), HeaderError> {
    if body.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Ok(());
    }
    let Some(tool) = body
        .pointer("/params/name")
        .and_then(Value::as_str)
        .and_then(|n| tools.get(n))
    else {
        return Ok(());
    };
    for (param, name) in tool.param_headers() {
        let header = format!("mcp-param-{}", name.to_ascii_lowercase());
        if headers.get_all(header.as_str()).iter().count() > 1 {
            return Err(HeaderError::Repeated(format!("Mcp-Param-{name}")));
        }
        let given = header_str(headers, &header);
        let argument = body
            .pointer(&format!("/params/arguments/{param}"))
            .filter(|v| !v.is_null());
        match (argument, given) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(HeaderError::ParamWithoutArgument {
                    name: name.to_string(),
                    param: param.to_string(),
                })
            }
            (Some(_), None) => {
                return Err(HeaderError::ArgumentWithoutParam {
                    name: name.to_string(),
                    param: param.to_string(),
                })
            }
            (Some(arg), Some(h)) => {
                let decoded = decode_header_value(h)
                    .ok_or_else(|| HeaderError::ParamEncoding(name.to_string()))?;
                let same = match arg {
                    Value::String(s) => *s == decoded,
                    Value::Bool(b) => decoded == b.to_string(),
                    Value::Number(n) => match (n.as_f64(), decoded.trim().parse::<f64>()) {
                        (Some(a), Ok(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
                        _ => false,
                    },
                    _ => false,
                };
                if !same {
                    return Err(HeaderError::ParamMismatch {
                        name: name.to_string(),
                        param: param.to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// A header value, decoding the `=?base64?...?=` form used for values that
/// are not plain visible ASCII (strict: padded, base64 alphabet only).
pub(super) fn decode_header_value(v: &str) -> Option<String> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        None => Some(v.to_string()),
        Some(payload) => String::from_utf8(base64_decode(payload)?).ok(),
    }
}

pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // Whole quads, with `=` only as the padding of the last one.
    let body = s.trim_end_matches('=');
    if !s.len().is_multiple_of(4) || s.len() - body.len() > 2 {
        return None;
    }
    let s = body;
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}
