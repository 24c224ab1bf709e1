//! File stamps: what the caches key on to notice a changed file (below
//! both `implementation` and `locate`, which use it).

use std::path::Path;

/// `size:mtime` of a file, or empty when it cannot be read.
pub fn file_stamp(p: &Path) -> String {
    match std::fs::metadata(p) {
        Ok(m) => {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            format!("{}:{}", m.len(), mtime)
        }
        Err(_) => String::new(),
    }
}
