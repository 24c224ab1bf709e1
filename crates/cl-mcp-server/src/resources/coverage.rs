//! The coverage reports `asdf-test-system {coverage: true}` leaves (its
//! pages, `text/html`) as `lisp://coverage/<system>/<page>` resources:
//! `index.html` is sb-cover's index, the other pages are its per-file pages
//! the index links to. Read from the project's coverage directory in the
//! cache through a handle on it, so nothing the image writes there (a
//! symbolic link) leads a read outside, and opened as the file tools open
//! files ([`open_regular_in`]: without waiting, then `fstat`), so a named
//! pipe the image leaves there is refused at once instead of blocking the
//! read until someone writes to it.

use std::path::Path;

use serde_json::{json, Value};

use super::ResourceError;
use crate::session::Session;
use crate::tools::asdf::coverage::{page_uri, project_reports, system_segment, INDEX_PAGE};
use crate::tools::fs_paths::{open_regular_in, read_capped, ReadCapError};

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
/// percent-decoded). Blocking file I/O: run it off the async workers.
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
    let shown = format!("{}/{file}", system_segment(system));
    let (f, meta) = match open_regular_in(&reports, &path, &shown) {
        Ok(opened) => opened,
        // Missing: not found. Anything else (a pipe, socket, device or
        // directory stands there): the request cannot be served, said why.
        Err(e) if reports.symlink_metadata(&path).is_err() => return Err(missing(e.to_string())),
        Err(e) => {
            return Err(ResourceError::Invalid(format!(
                "Cannot read {uri}: {e} A coverage report's pages are regular files written by \
                 asdf-test-system {{coverage: true}}; run it again for {system}."
            )))
        }
    };
    let bytes = match read_capped(f, meta.len(), PAGE_CAP_BYTES, &shown) {
        Ok(bytes) => bytes,
        Err(ReadCapError::TooBig(_)) => {
            return Err(ResourceError::Invalid(format!(
                "{uri} is over {} MiB; open {} in a browser",
                PAGE_CAP_BYTES / 1024 / 1024,
                project_reports(session).join(&path).display()
            )))
        }
        Err(ReadCapError::Other(e)) => {
            return Err(ResourceError::Invalid(format!("Cannot read {uri}: {e}")))
        }
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": "text/html", "text": text }] }))
}
