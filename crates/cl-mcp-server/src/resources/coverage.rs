//! The coverage reports `asdf-test-system {coverage: true}` leaves (its
//! pages, `text/html`) as `lisp://coverage/<system>/<page>` resources:
//! `index.html` is sb-cover's index, the other pages are its per-file pages
//! the index links to. Read from the project's coverage directory in the
//! cache through a handle on it, so nothing the image writes there (a
//! symbolic link) leads a read outside.

use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};

use super::ResourceError;
use crate::session::Session;
use crate::tools::asdf::coverage::{page_uri, project_reports, system_segment, INDEX_PAGE};

/// The largest page served (sb-cover's pages mark every character up).
const PAGE_CAP_BYTES: u64 = 16 * 1024 * 1024;

/// The template of the report pages, for `resources/templates/list`.
pub fn template() -> Value {
    json!({"uriTemplate": "lisp://coverage/{system}/{page}", "name": "Coverage report",
        "description": "The HTML coverage report of asdf-test-system {coverage: true} (SBCL): \
                        index.html, and the per-file pages it links to.",
        "mimeType": "text/html"})
}

/// The index page of every report of the session's project.
pub fn listed(session: &Session) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(project_reports(session)) else {
        return Vec::new();
    };
    let mut systems: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().join(INDEX_PAGE).is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|seg| crate::uri::percent_decode(&seg).ok())
        .collect();
    systems.sort();
    systems
        .iter()
        .map(|system| {
            json!({"uri": page_uri(system, INDEX_PAGE), "name": format!("Coverage of {system}"),
                "description": format!("sb-cover's report of the last asdf-test-system \
                                        {{coverage: true}} run of {system}"),
                "mimeType": "text/html"})
        })
        .collect()
}

/// `resources/read` of `lisp://coverage/<system>/<page>` (`system` already
/// percent-decoded).
pub fn read(
    session: &Session,
    uri: &str,
    system: &str,
    page: &str,
) -> Result<Value, ResourceError> {
    let file = if page == "index.html" {
        INDEX_PAGE
    } else {
        page
    };
    let stem_ok = file
        .strip_suffix(".html")
        .is_some_and(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    if !stem_ok {
        return Err(ResourceError::NotFound(format!(
            "No coverage page {page}: a report has index.html and the pages it links to"
        )));
    }
    let missing = |why: String| {
        ResourceError::NotFound(format!(
            "No coverage report page {uri} ({why}): run asdf-test-system with coverage: true \
             for {system} first"
        ))
    };
    let reports =
        cap_std::fs::Dir::open_ambient_dir(project_reports(session), cap_std::ambient_authority())
            .map_err(|e| missing(e.to_string()))?;
    let path = Path::new(&system_segment(system)).join(file);
    let f = reports.open(&path).map_err(|e| missing(e.to_string()))?;
    let is_file = f.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !is_file {
        return Err(missing("not a file".into()));
    }
    let mut bytes = Vec::new();
    f.take(PAGE_CAP_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ResourceError::Invalid(format!("Cannot read {uri}: {e}")))?;
    if bytes.len() as u64 > PAGE_CAP_BYTES {
        return Err(ResourceError::Invalid(format!(
            "{uri} is over {} MiB; open {} in a browser",
            PAGE_CAP_BYTES / 1024 / 1024,
            project_reports(session).join(&path).display()
        )));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": "text/html", "text": text }] }))
}
