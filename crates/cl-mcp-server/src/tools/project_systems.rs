//! The `.asd` files under a project root, as the image is told of them:
//! found by the walk `clgrep-search` makes (`.gitignore`/`.ignore` rules,
//! read safely by [`safe_walk`]), each with the system names its
//! `defsystem` forms spell out (read with the source tools' definition
//! reader, nothing of the file run). The image finds these before any
//! installed system (`lisp/project.lisp`), so a checkout or a vendored copy
//! under the root is the copy loaded and tested.
//!
//! The walk is bounded: hidden directories (but `.qlot`), the usual build
//! and dependency output folders, the server's cache and a Quicklisp
//! install's `dists/` are skipped, and it stops after [`MAX_WALK_ENTRIES`]
//! entries. It remembers the date of every directory and `.asd` it read,
//! so a later call sees cheaply whether it must walk again.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cap_std::fs::Dir;

use super::fs_paths::{open_regular_in, read_capped, rel_under};
use super::safe_walk::{self, Rules};
use super::source::{defs, scan};

/// Entries (files and directories) one walk looks at before it stops.
pub const MAX_WALK_ENTRIES: usize = 20_000;

/// Directory names never entered: build output and other languages'
/// dependency trees.
const SKIPPED_DIRECTORIES: &[&str] = &[
    "target",
    "node_modules",
    "build",
    "_build",
    "dist",
    "CVS",
    "_darcs",
    "_sgbak",
];

/// Hidden directories walked all the same: where a tool keeps the
/// project's own pinned libraries.
const WALKED_HIDDEN: &[&str] = &[".qlot"];

/// Largest `.asd` read for its system names.
const MAX_ASD_BYTES: u64 = 1024 * 1024;

/// One `.asd` file under the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsdFile {
    pub path: PathBuf,
    /// The system names its `defsystem` forms define, lower case, the
    /// file's own name first.
    pub names: Vec<String>,
}

/// What one walk of a root found.
#[derive(Debug)]
pub struct AsdWalk {
    pub root: PathBuf,
    /// Shallowest first, then in path order: the order in which a name
    /// defined twice is taken.
    pub files: Vec<AsdFile>,
    /// The walk stopped at [`MAX_WALK_ENTRIES`] before it saw everything.
    pub stopped: bool,
    /// Directories and `.asd` files read, with their dates then.
    stamps: Vec<(PathBuf, Option<SystemTime>)>,
    walked_at: SystemTime,
}

impl AsdWalk {
    /// Walks `root`, never entering `skip` (the server's cache).
    pub fn walk(root: &Path, skip: &[PathBuf]) -> AsdWalk {
        AsdWalk::walk_limited(root, skip, MAX_WALK_ENTRIES)
    }

    fn walk_limited(root: &Path, skip: &[PathBuf], limit: usize) -> AsdWalk {
        let walked_at = SystemTime::now();
        let mut out = AsdWalk {
            root: root.to_path_buf(),
            files: Vec::new(),
            stopped: false,
            stamps: Vec::new(),
            walked_at,
        };
        let Ok(dir) = Dir::open_ambient_dir(root, cap_std::ambient_authority()) else {
            return out;
        };
        let rules = std::sync::Arc::new(Rules::new(dir, root));
        let filter = rules.clone();
        let skip = skip.to_vec();
        let mut builder = safe_walk::builder(root);
        builder
            .hidden(false)
            .max_depth(Some(16))
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| {
                let is_dir = e.file_type().is_some_and(|t| t.is_dir());
                e.depth() == 0
                    || (walked_name(e.path(), is_dir)
                        && !(is_dir && skip.iter().any(|s| e.path().starts_with(s)))
                        && !(is_dir && quicklisp_dists(e.path()))
                        && filter.keep(e.path(), is_dir))
            });
        let mut seen = 0usize;
        for entry in builder.build() {
            let Ok(entry) = entry else { continue };
            seen += 1;
            if seen > limit {
                out.stopped = true;
                break;
            }
            let p = entry.path();
            let Some(t) = entry.file_type() else { continue };
            if t.is_dir() {
                out.stamps.push((p.to_path_buf(), modified(p)));
            } else if t.is_file() && p.extension().is_some_and(|x| x == "asd") {
                out.stamps.push((p.to_path_buf(), modified(p)));
                let names = asd_names(rules.dir(), root, p);
                out.files.push(AsdFile {
                    path: p.to_path_buf(),
                    names,
                });
            }
        }
        out.files.sort_by(|a, b| {
            let depth = |f: &AsdFile| f.path.components().count();
            depth(a).cmp(&depth(b)).then_with(|| a.path.cmp(&b.path))
        });
        out
    }

    /// Whether nothing the walk read changed since: no directory gained or
    /// lost an entry, no `.asd` was edited. A date within a second of the
    /// walk does not count as current (a file system's dates are coarse).
    pub fn is_current(&self) -> bool {
        let fresh = self.walked_at - Duration::from_secs(1);
        self.stamps.iter().all(|(p, then)| {
            let now = modified(p);
            now.is_some() && now == *then && now.is_some_and(|t| t < fresh)
        })
    }

    /// How many directories and `.asd` files a freshness check dates.
    pub fn stamp_count(&self) -> usize {
        self.stamps.len()
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(p).and_then(|m| m.modified()).ok()
}

/// Whether the walk enters or lists an entry by its name: hidden ones
/// only when they are [`WALKED_HIDDEN`] directories; no skipped directory.
fn walked_name(path: &Path, is_dir: bool) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if is_dir && SKIPPED_DIRECTORIES.contains(&name) {
        return false;
    }
    !name.starts_with('.') || (is_dir && WALKED_HIDDEN.contains(&name))
}

/// A Quicklisp install's `dists/` (beside its `setup.lisp` and
/// `quicklisp/`): every library Quicklisp ever downloaded, not the
/// project's. Qlot's `.qlot/dists/` holds the project's pinned libraries
/// and is walked.
fn quicklisp_dists(path: &Path) -> bool {
    let Some(parent) = path.parent() else {
        return false;
    };
    path.file_name().is_some_and(|n| n == "dists")
        && parent.file_name().is_none_or(|n| n != ".qlot")
        && parent.join("setup.lisp").is_file()
        && parent.join("quicklisp").is_dir()
}

/// The names the `.asd` at `path` defines: its own name first, then each
/// `defsystem`'s, lower case (as ASDF coerces a symbol's name).
fn asd_names(dir: &Dir, root: &Path, path: &Path) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
        names.push(stem.to_lowercase());
    }
    let shown = path.display().to_string();
    let text = open_regular_in(dir, &rel_under(root, path), &shown)
        .ok()
        .and_then(|(f, meta)| read_capped(f, meta.len(), MAX_ASD_BYTES, &shown).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    for name in text.as_deref().map(defined_systems).unwrap_or_default() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The system names the `defsystem` forms of `text` define (any package's
/// `defsystem`, inside `eval-when` or reader conditionals too), as ASDF
/// spells them: lower case, no `:`, `#:` or quotes.
pub fn defined_systems(text: &str) -> Vec<String> {
    let forms = scan::scan_recovering(text);
    defs::definitions(text, forms.forms())
        .into_iter()
        .filter(|d| d.kind_key == "defsystem")
        .filter_map(|d| system_name(&d.name))
        .collect()
}

/// `:foo`, `#:foo`, `foo`, `"foo"` → `foo`; `None` for what names no
/// system (a list, an empty name).
fn system_name(written: &str) -> Option<String> {
    let w = written.trim();
    let bare = if let Some(s) = w.strip_prefix('"') {
        s.strip_suffix('"')?
    } else {
        w.trim_start_matches("#:").trim_start_matches(':')
    };
    let bare = bare.trim_matches('|');
    (!bare.is_empty() && !bare.contains(['(', ')', ' ', '"'])).then(|| bare.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defsystem_names_as_asdf_spells_them() {
        let text = "(in-package :asdf)\n(defsystem :cl-ppcre :components ((:file \"a\")))\n\
                    ;; (defsystem :in-a-comment)\n\
                    (asdf:defsystem \"Cl-PPCRE-Test\" :depends-on (:cl-ppcre))\n\
                    #+sbcl (defsystem #:x/y)\n(eval-when (:load-toplevel) (defsystem z))\n";
        assert_eq!(
            defined_systems(text),
            ["cl-ppcre", "cl-ppcre-test", "x/y", "z"]
        );
    }

    #[test]
    fn walk_orders_shallow_first_skips_and_stops() {
        let t = std::env::temp_dir().join(format!("asd-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        for d in [
            "a/b",
            "c",
            ".git/x",
            ".hidden",
            ".qlot/local",
            "node_modules/m",
            "ignored",
            "cache",
            "ql/dists/quicklisp",
            "ql/quicklisp",
        ] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        for f in [
            "a/b/deep.asd",
            "c/x.asd",
            "top.asd",
            ".git/x/git.asd",
            ".hidden/h.asd",
            ".qlot/local/q.asd",
            "node_modules/m/m.asd",
            "ignored/i.asd",
            "cache/k.asd",
            "ql/dists/quicklisp/d.asd",
        ] {
            std::fs::write(t.join(f), "(defsystem \"s\")").unwrap();
        }
        std::fs::write(t.join("ql/setup.lisp"), "").unwrap();
        std::fs::write(t.join(".gitignore"), "ignored/\n").unwrap();
        let w = AsdWalk::walk(&t, &[t.join("cache")]);
        let rel: Vec<_> = w
            .files
            .iter()
            .map(|f| {
                f.path
                    .strip_prefix(&t)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(
            rel,
            ["top.asd", "c/x.asd", ".qlot/local/q.asd", "a/b/deep.asd"]
        );
        assert_eq!(w.files[0].names, ["top", "s"]);
        assert!(!w.stopped);
        let few = AsdWalk::walk_limited(&t, &[], 3);
        assert!(few.stopped && few.files.len() < 4);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
