//! The flame graph resources `lisp://profile/<id>/flamegraph.svg` and
//! `.../flamegraph.png`: what `profile-code` drew, kept by the session
//! (`tools::flame_graph`).

use serde_json::{json, Value};

use super::ResourceError;
use crate::session::Session;
use crate::tools::flame_graph::{base64, KEPT};

/// `resources/read` of `lisp://profile/<id>/<file>`.
pub fn read(session: &Session, uri: &str, id: &str, file: &str) -> Result<Value, ResourceError> {
    let graph = crate::tools::attach_session(session)
        .flame_graphs
        .get(id)
        .ok_or_else(|| {
            ResourceError::NotFound(format!(
                "No flame graph {uri}: a session keeps the flame graphs of its last {KEPT} \
                 profiles; run profile-code again"
            ))
        })?;
    match file {
        "flamegraph.svg" => Ok(json!({"contents": [{
            "uri": uri, "mimeType": "image/svg+xml", "text": graph.svg}]})),
        "flamegraph.png" => Ok(json!({"contents": [{
            "uri": uri, "mimeType": "image/png", "blob": base64(&graph.png)}]})),
        _ => Err(ResourceError::NotFound(format!(
            "Unknown profile resource {uri}: use lisp://profile/<id>/flamegraph.svg or \
             lisp://profile/<id>/flamegraph.png"
        ))),
    }
}
