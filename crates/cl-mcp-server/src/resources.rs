//! MCP resources: the project's documents as `file://` resources (text files
//! under the project root, `.gitignore` respected), and the live image as
//! `lisp://` resources: `lisp://image/info`, and the templates
//! `lisp://package/{name}`, `lisp://symbol/{package}/{name}`,
//! `lisp://system/{name}` (read through the same code as the tools, with
//! completion of their variables from the image), the coverage reports
//! (`coverage.rs`) and the session's flame graphs (`flame_graphs.rs`).

mod coverage;
mod flame_graphs;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::session::Session;
use crate::tools::fs::{read_text_capped, resolve_existing_file};
use crate::tools::lisp_call::{call_lookup, helper_form, plist_i64, plist_str, plist_strings};
use crate::tools::{ToolContext, ToolGroup, ToolRegistry};

/// Most resources one `resources/list` page holds.
pub const PAGE: usize = 500;

/// Why a resource cannot be read or listed. The protocol answers
/// `NotFound` as an unknown resource (`-32002`, or `-32602` in 2026-07-28)
/// and `Invalid` as `-32602`; the message is the error's data.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// No such resource (a missing file, an unknown `lisp://` name).
    #[error("{0}")]
    NotFound(String),
    /// The request is wrong (a broken URI, a bad cursor, an unreadable file).
    #[error("{0}")]
    Invalid(String),
    /// The image could not answer (completion values come from it).
    #[error("{0}")]
    Image(String),
}

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
    crate::uri::file_uri(path)
}

/// `resources/list`: the project's documents, a page at a time (`cursor` is
/// the offset of the page).
pub fn list(session: &Session, cursor: Option<&str>) -> Result<Value, ResourceError> {
    let start: usize = match cursor {
        None => 0,
        Some(c) => c.parse().map_err(|_| {
            ResourceError::Invalid(format!(
                "Invalid cursor '{c}': pass back a nextCursor value"
            ))
        })?,
    };
    let root = session.project_root();
    // Ignore files read safely (a FIFO named .gitignore is not waited on).
    let dir =
        cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority()).map_err(|e| {
            ResourceError::Invalid(format!(
                "Cannot list the project root {}: {e}",
                root.display()
            ))
        })?;
    let rules = std::sync::Arc::new(crate::tools::safe_walk::Rules::new(dir, &root));
    let mut builder = crate::tools::safe_walk::builder(&root);
    builder.filter_entry(move |e| rules.keep(e.path(), e.file_type().is_some_and(|t| t.is_dir())));
    let mut files: Vec<std::path::PathBuf> = builder
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .filter(|p| is_document(p))
        .collect();
    files.sort();
    let total = files.len();
    let mut resources: Vec<Value> = Vec::new();
    if start == 0 {
        resources.push(json!({"uri": "lisp://image/info", "name": "Lisp image",
            "description": "The session's Lisp image: implementation, version, pid, uptime, features, loaded systems.",
            "mimeType": "text/plain"}));
        resources.extend(coverage::listed(session));
    }
    resources.extend(files.iter().skip(start).take(PAGE).map(|p| {
        let rel = p
            .strip_prefix(&root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned();
        let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        json!({"uri": file_uri(p), "name": rel, "mimeType": mime_of(p), "size": size})
    }));
    let mut result = json!({ "resources": resources });
    if start + PAGE < total {
        result["nextCursor"] = json!((start + PAGE).to_string());
    }
    Ok(result)
}

/// `resources/read` of a `file://` URI, under the same read policy as the
/// file tools.
pub fn read_file_uri(session: &Session, uri: &str) -> Result<Value, ResourceError> {
    let path = crate::uri::file_uri_path(uri)
        .map_err(|e| ResourceError::Invalid(format!("Cannot read {uri}: {e}.")))?;
    let resolved = resolve_existing_file(session, &path.to_string_lossy())
        .map_err(|e| ResourceError::NotFound(e.to_string()))?;
    let text = read_text_capped(&resolved).map_err(|e| ResourceError::Invalid(e.to_string()))?;
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": mime_of(&resolved.path), "text": text }] }))
}

/// The `lisp://` resource templates.
pub fn templates() -> Value {
    json!([
        {"uriTemplate": "lisp://package/{name}", "name": "Lisp package",
         "description": "A package of the live image: nicknames, used packages, documentation, external symbols.",
         "mimeType": "text/plain"},
        {"uriTemplate": "lisp://symbol/{package}/{name}", "name": "Lisp symbol",
         "description": "What a symbol names in the live image: kinds, arglist, documentation, describe text.",
         "mimeType": "text/plain"},
        {"uriTemplate": "lisp://system/{name}", "name": "ASDF system",
         "description": "An ASDF system: version, description, author, license, dependencies, source file, loaded.",
         "mimeType": "text/plain"},
        coverage::template(),
    ])
}

/// Every tool, whatever `--tools` offers: resources read through them.
fn all_tools() -> &'static ToolRegistry {
    static ALL: OnceLock<ToolRegistry> = OnceLock::new();
    ALL.get_or_init(|| ToolRegistry::standard(&ToolGroup::ALL))
}

/// A decoded segment of a `lisp://` URI.
fn uri_part(uri: &str, s: &str) -> Result<String, ResourceError> {
    crate::uri::percent_decode(s)
        .map_err(|e| ResourceError::Invalid(format!("Cannot read {uri}: {e}.")))
}

/// `resources/read` of a `lisp://` URI.
pub async fn read_lisp_uri(session: Arc<Session>, uri: &str) -> Result<Value, ResourceError> {
    let path = uri
        .strip_prefix("lisp://")
        .ok_or_else(|| ResourceError::Invalid(format!("Not a lisp:// URI: {uri}")))?;
    let parts: Vec<&str> = path.split('/').collect();
    let ctx = ToolContext::new(session, CancellationToken::new());
    let via_tool = |name: &'static str, args: Value| {
        let ctx = ctx.clone();
        async move {
            let tool = all_tools().get(name).expect("built-in tool");
            tool.call(args, ctx).await
        }
    };
    let out = match parts.as_slice() {
        ["profile", id, file] => return flame_graphs::read(&ctx.session, uri, id, file),
        ["coverage", system, page] => {
            // File I/O: off the async workers, like every file read.
            let (session, uri, system, page) = (
                ctx.session.clone(),
                uri.to_string(),
                uri_part(uri, system)?,
                page.to_string(),
            );
            return tokio::task::spawn_blocking(move || {
                coverage::read(&session, &uri, &system, &page)
            })
            .await
            .unwrap_or_else(|e| {
                Err(ResourceError::Invalid(format!(
                    "Reading the coverage page failed: {e}"
                )))
            });
        }
        ["image", "info"] => via_tool("image-info", json!({})).await,
        ["symbol", package, name] if !name.is_empty() => {
            via_tool(
                "code-describe",
                json!({"symbol": uri_part(uri, name)?, "package": uri_part(uri, package)?}),
            )
            .await
        }
        ["system", name] if !name.is_empty() => {
            via_tool("asdf-system-info", json!({"system": uri_part(uri, name)?})).await
        }
        ["package", name] if !name.is_empty() => {
            let form = helper_form(
                "package-info",
                vec![lisp_syntax::data::Value::string(uri_part(uri, name)?)],
                vec![],
            );
            match call_lookup(&ctx, &form).await {
                Ok(v) => crate::tools::ToolOutput::text(render_package(&v)),
                Err(e) => crate::tools::ToolOutput::error(e),
            }
        }
        _ => {
            return Err(ResourceError::NotFound(format!(
                "Unknown lisp:// resource {uri}: use lisp://image/info, lisp://package/NAME, \
                 lisp://symbol/PACKAGE/NAME, lisp://system/NAME, a profile's \
                 lisp://profile/ID/flamegraph.svg or \
                 lisp://coverage/SYSTEM/index.html"
            )))
        }
    };
    if out.is_error {
        return Err(ResourceError::NotFound(out.text));
    }
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": "text/plain", "text": out.text }] }))
}

fn render_package(v: &lisp_syntax::data::Value) -> String {
    let list = |k: &str| {
        let items = plist_strings(v, k);
        if items.is_empty() {
            "-".to_string()
        } else {
            items.join(" ")
        }
    };
    let mut text = format!(
        "Package {}\nNicknames: {}\nUses: {}\nUsed by: {}\n",
        plist_str(v, "name").unwrap_or_default(),
        list("nicknames"),
        list("use"),
        list("used-by")
    );
    if let Some(doc) = plist_str(v, "documentation") {
        text.push_str(&format!("Documentation: {doc}\n"));
    }
    let externals = plist_strings(v, "externals");
    let count = plist_i64(v, "external-count").unwrap_or(externals.len() as i64);
    text.push_str(&format!("External symbols ({count}):"));
    for name in &externals {
        text.push_str(&format!("\n  {name}"));
    }
    if (externals.len() as i64) < count {
        text.push_str(&format!(
            "\n  ... and {} more",
            count - externals.len() as i64
        ));
    }
    text
}

/// Completion values for a `lisp://` template variable, from the image.
pub async fn complete_template(
    session: Arc<Session>,
    template: &str,
    argument: &str,
    typed: &str,
    context: &Value,
) -> Result<Vec<String>, ResourceError> {
    let kind = match (template, argument) {
        ("lisp://package/{name}", "name") | ("lisp://symbol/{package}/{name}", "package") => {
            "package"
        }
        ("lisp://symbol/{package}/{name}", "name") => "symbol",
        ("lisp://system/{name}", "name") => "system",
        _ => return Ok(Vec::new()),
    };
    let mut keys = vec![];
    if kind == "symbol" {
        if let Some(p) = context
            .pointer("/arguments/package")
            .and_then(Value::as_str)
        {
            keys.push(("package", lisp_syntax::data::Value::string(p)));
        }
    }
    let form = helper_form(
        "complete-names",
        vec![
            lisp_syntax::data::Value::string(kind),
            lisp_syntax::data::Value::string(typed),
        ],
        keys,
    );
    let ctx = ToolContext::new(session, CancellationToken::new());
    let v = call_lookup(&ctx, &form)
        .await
        .map_err(|e| ResourceError::Image(e.to_string()))?;
    Ok(plist_strings(&v, "values"))
}
