//! MCP resources: the project's documents as `file://` resources (text files
//! under the project root, `.gitignore` respected). The image's own
//! resources (`lisp://…`) join them through [`LispResources`] when an image
//! layer provides one.

use std::path::Path;

use serde_json::{json, Value};

use crate::session::Session;
use crate::tools::fs::{read_text_capped, resolve_existing_file};

/// Most resources one `resources/list` page holds.
pub const PAGE: usize = 500;

/// JSON-RPC error code for an unknown resource (MCP).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

const TEXT_EXTENSIONS: &[&str] = &[
    "lisp", "lsp", "cl", "asd", "ros", "md", "markdown", "txt", "org", "rst",
];

fn mime_of(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "lisp" | "lsp" | "cl" | "asd" | "ros" => "text/x-lisp",
        "md" | "markdown" => "text/markdown",
        "org" => "text/org",
        _ => "text/plain",
    }
}

fn is_document(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    TEXT_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
        || matches!(name, "README" | "LICENSE" | "COPYING" | "CHANGELOG")
}

/// `file://` URI of an absolute path (percent-encoding what URIs cannot hold).
pub fn file_uri(path: &Path) -> String {
    let mut out = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `resources/list`: the project's documents, a page at a time (`cursor` is
/// the offset of the page).
pub fn list(session: &Session, cursor: Option<&str>) -> Result<Value, String> {
    let start: usize = match cursor {
        None => 0,
        Some(c) => c
            .parse()
            .map_err(|_| format!("Invalid cursor '{c}': pass back a nextCursor value"))?,
    };
    let root = session.project_root();
    let mut files: Vec<std::path::PathBuf> = ignore::WalkBuilder::new(&root)
        .hidden(true)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .filter(|p| is_document(p))
        .collect();
    files.sort();
    let total = files.len();
    let resources: Vec<Value> = files
        .iter()
        .skip(start)
        .take(PAGE)
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned();
            let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            json!({"uri": file_uri(p), "name": rel, "mimeType": mime_of(p), "size": size})
        })
        .collect();
    let mut result = json!({ "resources": resources });
    if start + PAGE < total {
        result["nextCursor"] = json!((start + PAGE).to_string());
    }
    Ok(result)
}

/// `resources/read` of a `file://` URI, under the same read policy as the
/// file tools. `Err((code, message))` on failure.
pub fn read_file_uri(session: &Session, uri: &str) -> Result<Value, (i64, String)> {
    let path = crate::protocol::mcp::file_uri_path(uri).ok_or_else(|| {
        (
            crate::protocol::jsonrpc::INVALID_PARAMS,
            format!("Not a local file URI: {uri}"),
        )
    })?;
    let resolved = resolve_existing_file(session, &path.to_string_lossy())
        .map_err(|e| (RESOURCE_NOT_FOUND, e))?;
    let text = read_text_capped(&resolved.path, &resolved.display)
        .map_err(|e| (crate::protocol::jsonrpc::INVALID_PARAMS, e))?;
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": mime_of(&resolved.path), "text": text }] }))
}
