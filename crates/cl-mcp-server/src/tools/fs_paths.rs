//! The path policy every file-touching tool goes through, and atomic writes.
//!
//! A user path is resolved against the session's project root and made
//! canonical (symlinks resolved) *before* it is checked, so `..`, absolute
//! paths and symlinks that lead out of the root are all caught by one test:
//! "is the canonical path under an allowed root?". A path that does not exist
//! yet (a file about to be written) is checked through its deepest existing
//! ancestor, which is canonicalized; the missing rest may not contain `..`.
//!
//! Reads are allowed under the project root and under extra read roots (the
//! source directories of ASDF systems, supplied by the image layer through
//! [`asdf_source_roots`]); writes only under the project root.

use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::session::Session;

/// What the caller wants to do with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read a file or list a directory: project root or an extra read root.
    Read,
    /// Create, replace or edit: project root only.
    Write,
}

/// A path that passed the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Absolute, canonical (for the existing part) path.
    pub path: PathBuf,
    /// Whether something exists there now.
    pub exists: bool,
    /// The path as shown to the user: relative to the project root when
    /// inside it, else absolute.
    pub display: String,
}

/// Why a path was refused; the message says what and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathError(pub String);

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PathError {}

/// Extra directories reads may come from besides the project root: the
/// source directories of the ASDF systems the session's image has
/// registered, as last refreshed from the image. Every read tool
/// (`fs-read-file`, `fs-list-directory`, `lisp-read-file`,
/// `lisp-check-parens`, `clgrep-*`) allows them.
pub fn asdf_source_roots(session: &Session) -> Vec<PathBuf> {
    session.read_roots()
}

/// Resolves `user_path` (relative to `root`, or absolute) and checks it
/// against the policy for `access`. `extra_read_roots` are accepted for
/// [`Access::Read`] only. An empty path means the root itself.
pub fn resolve(
    root: &Path,
    user_path: &str,
    access: Access,
    extra_read_roots: &[PathBuf],
) -> Result<ResolvedPath, PathError> {
    let root = root.canonicalize().map_err(|e| {
        PathError(format!(
            "The project root {} is not accessible ({e}); set a valid one with fs-set-project-root.",
            root.display()
        ))
    })?;
    let trimmed = user_path.trim();
    let raw = if trimmed.is_empty() {
        root.clone()
    } else if Path::new(trimmed).is_absolute() {
        PathBuf::from(trimmed)
    } else {
        root.join(trimmed)
    };
    let (path, exists) = canonicalize_lenient(&raw).map_err(|why| {
        PathError(format!(
            "Refused path '{user_path}': {why}. The project root is {}.",
            root.display()
        ))
    })?;
    if path.starts_with(&root) {
        return Ok(ResolvedPath {
            display: display_path(&root, &path),
            path,
            exists,
        });
    }
    if access == Access::Read {
        for extra in extra_read_roots {
            let extra = extra.canonicalize().unwrap_or_else(|_| extra.clone());
            if path.starts_with(&extra) {
                return Ok(ResolvedPath {
                    display: path.display().to_string(),
                    path,
                    exists,
                });
            }
        }
    }
    let via = if raw != path {
        format!(" (it resolves to {})", path.display())
    } else {
        String::new()
    };
    let allowed = match access {
        Access::Write => "Writes are allowed only under the project root".to_string(),
        Access::Read if extra_read_roots.is_empty() => {
            "Reads are allowed only under the project root".to_string()
        }
        Access::Read => format!(
            "Reads are allowed only under the project root or an ASDF system's source directory ({})",
            extra_read_roots
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(PathError(format!(
        "Refused path '{user_path}'{via}: it is outside the project root {}. {allowed}; \
         use a path inside it, or change the root with fs-set-project-root.",
        root.display()
    )))
}

/// Canonicalizes `raw`; if it does not exist, canonicalizes its deepest
/// existing ancestor and appends the rest, which must be plain names.
/// Returns the path and whether it exists.
fn canonicalize_lenient(raw: &Path) -> Result<(PathBuf, bool), String> {
    match raw.canonicalize() {
        Ok(p) => return Ok((p, true)),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot resolve it ({e})"))
        }
        Err(_) => {}
    }
    let mut rest: Vec<OsString> = Vec::new();
    let mut cur = raw.to_path_buf();
    loop {
        // A name that exists as a symlink but does not canonicalize is a
        // dangling link: following it later could land anywhere.
        if std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!(
                "{} is a symbolic link whose target does not exist",
                cur.display()
            ));
        }
        let name = match cur.components().next_back() {
            Some(Component::Normal(n)) => n.to_os_string(),
            Some(Component::CurDir) => OsString::new(),
            Some(Component::ParentDir) => {
                return Err("'..' may not follow a directory that does not exist".into())
            }
            _ => return Err("no part of it exists".into()),
        };
        if !name.is_empty() {
            rest.push(name);
        }
        if !cur.pop() {
            return Err("no part of it exists".into());
        }
        match cur.canonicalize() {
            Ok(base) => {
                if !base.is_dir() {
                    return Err(format!("{} is not a directory", base.display()));
                }
                let mut p = base;
                for n in rest.iter().rev() {
                    p.push(n);
                }
                return Ok((p, false));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot resolve {} ({e})", cur.display())),
        }
    }
}

/// `path` relative to `root` when inside it (`.` for the root), else absolute.
pub fn display_path(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to `path` atomically: a temporary file in the same
/// directory is written, synced, given the original file's permission mode
/// (when replacing one), then renamed over `path`. Readers see the old or
/// the new content, never a mix; a failure leaves the original untouched.
/// Missing parent directories are created.
pub fn atomic_write(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has no parent")
    })?;
    std::fs::create_dir_all(dir)?;
    let original_mode = std::fs::metadata(path).ok().map(|m| m.permissions());
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(content)?;
        f.sync_all()?;
        if let Some(perm) = original_mode {
            std::fs::set_permissions(&tmp, perm)?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_components_in_missing_rest() {
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let (p, exists) = canonicalize_lenient(&dir.join("no-such-x/./y")).unwrap();
        assert!(!exists);
        assert_eq!(p, dir.join("no-such-x/y"));
        assert!(canonicalize_lenient(&dir.join("no-such-x/../y")).is_err());
    }

    #[test]
    fn extra_read_roots_allow_reads_only() {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("fs-paths-extra-{}", std::process::id()));
        let root = base.join("root");
        let lib = base.join("lib");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("x.lisp"), "(x)").unwrap();
        let target = lib.join("x.lisp").display().to_string();
        let extra = [lib.clone()];
        let r = resolve(&root, &target, Access::Read, &extra).unwrap();
        assert_eq!(r.display, target, "outside the root: shown absolute");
        let e = resolve(&root, &target, Access::Write, &extra).unwrap_err();
        assert!(
            e.0.contains("Writes are allowed only under the project root"),
            "{e}"
        );
        let e = resolve(&root, &target, Access::Read, &[]).unwrap_err();
        assert!(
            e.0.contains("Reads are allowed only under the project root;"),
            "{e}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
